-- The search index of each scope (issue 17): derived data, fed from the journal, the memory
-- documents and the sessions by the indexing pass (`memory_search::Indexer`), and emptied
-- and fed again by `nanobot memory reindex`. Nothing else reads it.

-- What a scope's index holds in all, the number the next chunk written gets, and the
-- model of the vectors it holds.
CREATE TABLE search_heads (
    scope_id     bigint PRIMARY KEY REFERENCES scopes (scope_id) ON DELETE CASCADE,
    chunks       bigint NOT NULL DEFAULT 0 CHECK (chunks >= 0),
    next_seq     bigint NOT NULL DEFAULT 0,
    vector_model text,
    vector_dims  integer
);

-- One row per chunk. `terms` holds the chunk's normalised tokens (memory_index::tokens:
-- NFKC, lower case, CJK bigrams) with their positions, each lexeme prefixed by the scope
-- id (`12:coffee`), so the GIN index finds one scope's rows only, whatever other scopes
-- hold. `seq` numbers a scope's chunks in the order they were written (a query of common
-- words only ranks the newest). `vector` is little-endian f32 of the heads' model.
CREATE TABLE search_chunks (
    chunk_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    scope_id bigint NOT NULL REFERENCES scopes (scope_id) ON DELETE CASCADE,
    grp      text COLLATE "C" NOT NULL,
    part     integer NOT NULL,
    seq      bigint NOT NULL,
    source   text COLLATE "C" NOT NULL,
    kind     text NOT NULL,
    at       timestamp,
    body     text NOT NULL,
    terms    tsvector NOT NULL,
    vector   bytea,
    UNIQUE (scope_id, grp, part)
);
-- fastupdate off: new entries go into the index itself, not a pending list that every
-- search must scan through until a vacuum merges it (a measured 30 ms per query at 10,000
-- chunks just written).
CREATE INDEX search_chunks_terms ON search_chunks USING gin (terms) WITH (fastupdate = off);
CREATE INDEX search_chunks_newest ON search_chunks (scope_id, seq);

-- How many chunks of a scope hold each term, for the ranking's inverse document frequency
-- and the rule that leaves very common terms out of a query.
CREATE TABLE search_terms (
    scope_id bigint NOT NULL REFERENCES scopes (scope_id) ON DELETE CASCADE,
    term     text COLLATE "C" NOT NULL,
    chunks   bigint NOT NULL CHECK (chunks > 0),
    PRIMARY KEY (scope_id, term)
);

-- The indexing pass's records of what it has indexed (a journal cursor, a document's
-- version, a session's revision).
CREATE TABLE search_marks (
    scope_id bigint NOT NULL REFERENCES scopes (scope_id) ON DELETE CASCADE,
    name     text COLLATE "C" NOT NULL,
    value    text NOT NULL,
    PRIMARY KEY (scope_id, name)
);
