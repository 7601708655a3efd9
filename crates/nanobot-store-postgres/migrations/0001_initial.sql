-- nanobot-rs on PostgreSQL: every table of one deployment lives in one schema (the
-- search_path the store sets). Released migrations never change: a test pins their
-- checksums. Message bodies are their JSON text, verbatim (json/jsonb would reject NUL
-- escapes, reorder keys or drop duplicates), with the queried columns beside them. Free
-- text that may hold a NUL character (journal contents, documents, records) is stored as a
-- JSON string literal, since text cannot hold NUL.

-- Whose memory: one row per scope. The agent scope of an agent is the parent of its users'
-- and chats' scopes. Deleting a scope deletes everything below it.
CREATE TABLE scopes (
    scope_id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    canonical       text NOT NULL UNIQUE,
    tenant          text NOT NULL,
    agent           text NOT NULL,
    subject         text NOT NULL,
    parent_scope_id bigint REFERENCES scopes (scope_id) ON DELETE CASCADE,
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- Sessions: messages [0, next_seq), the pointer (how many are archived), metadata as the
-- session's metadata record holds it. epoch changes when the messages are replaced (a
-- rewrite), revision with every write: together they are the session's Revision.
CREATE TABLE sessions (
    session_id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    scope_id       bigint NOT NULL REFERENCES scopes (scope_id) ON DELETE CASCADE,
    session_key    text NOT NULL,
    epoch          bigint NOT NULL,
    revision       bigint NOT NULL,
    next_seq       bigint NOT NULL DEFAULT 0,
    pointer        bigint NOT NULL DEFAULT 0,
    created_at     timestamp NOT NULL,
    updated_at     timestamp NOT NULL,
    metadata       text NOT NULL,
    provider_state text,
    title          text,
    -- The listing's preview: the first user message with text among the first 200, else
    -- the first assistant message's (session-store's rule), kept as messages arrive.
    preview_user   text,
    preview_other  text,
    UNIQUE (scope_id, session_key),
    CHECK (pointer >= 0 AND pointer <= next_seq)
);

-- Epochs are never reused, not even for a session deleted and created again.
CREATE SEQUENCE session_epochs;

CREATE TABLE messages (
    session_id bigint NOT NULL REFERENCES sessions (session_id) ON DELETE CASCADE,
    seq        bigint NOT NULL,
    role       text,
    body       text NOT NULL,
    PRIMARY KEY (session_id, seq)
);

-- The journal: its head row hands out cursors inside the inserting transaction, so cursors
-- are gap-free and assigned in commit order (a reader polling cursor > x never skips one).
CREATE TABLE journal_heads (
    scope_id     bigint PRIMARY KEY REFERENCES scopes (scope_id) ON DELETE CASCADE,
    latest       bigint NOT NULL DEFAULT 0,
    dream_cursor bigint NOT NULL DEFAULT 0,
    CHECK (dream_cursor <= latest)
);

CREATE TABLE journal (
    scope_id    bigint NOT NULL REFERENCES scopes (scope_id) ON DELETE CASCADE,
    cursor      bigint NOT NULL,
    ts          text NOT NULL,
    content     text NOT NULL,
    session_key text,
    range_start bigint,
    range_end   bigint,
    digest      text,
    -- Fields of an imported entry this release does not model (a JSON object), kept.
    extra       text,
    PRIMARY KEY (scope_id, cursor)
);
CREATE INDEX journal_archives ON journal (scope_id, session_key, range_start)
    WHERE session_key IS NOT NULL AND range_start IS NOT NULL;

-- Documents (SOUL.md, USER.md, memory/MEMORY.md, skills/<name>/SKILL.md) and Dream's own
-- records, each written compare-and-set on its version.
CREATE TABLE documents (
    scope_id   bigint NOT NULL REFERENCES scopes (scope_id) ON DELETE CASCADE,
    path       text NOT NULL,
    version    bigint NOT NULL,
    content    text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope_id, path)
);

CREATE TABLE aux_files (
    scope_id bigint NOT NULL REFERENCES scopes (scope_id) ON DELETE CASCADE,
    name     text NOT NULL,
    content  text NOT NULL,
    PRIMARY KEY (scope_id, name)
);

-- Versions of the tracked files: whole snapshots, as git trees are, with a parent chain.
CREATE TABLE versions (
    scope_id bigint NOT NULL REFERENCES scopes (scope_id) ON DELETE CASCADE,
    seq      bigint NOT NULL,
    id       text NOT NULL,
    parent   text,
    message  text NOT NULL,
    time     timestamptz NOT NULL,
    files    text NOT NULL,
    PRIMARY KEY (scope_id, seq),
    UNIQUE (scope_id, id)
);

-- Leases with fencing (Dream, a session's turn): the row stays when released, so fences
-- only grow. The clock is the database's.
CREATE TABLE leases (
    scope_id   bigint NOT NULL REFERENCES scopes (scope_id) ON DELETE CASCADE,
    job        text NOT NULL,
    holder     text,
    fence      bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (scope_id, job)
);

-- What a deployment records about itself (the workspace id of an imported workspace).
CREATE TABLE store_meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

-- Operator links between identities, append-only, per deployment.
CREATE TABLE links (
    seq      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    record   text NOT NULL,
    identity text NOT NULL,
    target   text NOT NULL
);
