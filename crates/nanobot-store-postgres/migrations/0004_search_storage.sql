-- Where a chunk's `tsvector` is kept (issue 31). The words lane reads the `tsvector` of
-- every chunk that holds a query's rarest word (ts_rank picks the candidates); kept out of
-- line, each costs a TOAST lookup (PostgreSQL moves it there once a row passes about
-- 2 kB, as one with a 670-byte text does): 16 ms for a word in 2,000 of 100,000
-- chunks, 4.5 ms with it in the row. MAIN keeps it in the row (compressed if need be):
-- PostgreSQL moves the text and the vector out of line first.
-- Rows written before keep their place until they are written again (`nanobot memory
-- reindex` writes them all).
ALTER TABLE search_chunks ALTER COLUMN terms SET STORAGE MAIN;
