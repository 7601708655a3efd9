-- The vector lane's stamp (issue 17): each process keeps a copy of a scope's vectors and
-- ranks in it (memory_index::VectorCache); the stamp tells it, in one small read, whether
-- its copy is current, which vectors were stored since, or that it must read them all.
-- A stored vector is never changed in place: it is kept until its chunk goes or every
-- vector is cleared.

-- Bumped whenever a stored vector goes away (its chunk replaced or removed, all cleared).
-- It starts at a random value, so a head row made again never passes for an old one.
ALTER TABLE search_heads
    ADD COLUMN vectors_epoch bigint NOT NULL DEFAULT floor(random() * 4611686018427387903)::bigint;

-- The number a chunk's vector got when it was stored, taken from the head's `next_seq`
-- (vectors stored before this migration have none: a copy reads them in full).
ALTER TABLE search_chunks ADD COLUMN vector_seq bigint;
CREATE INDEX search_chunks_vectors ON search_chunks (scope_id, vector_seq) WHERE vector IS NOT NULL;
