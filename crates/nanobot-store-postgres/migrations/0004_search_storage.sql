-- Where a chunk's columns are kept (issue 31). The words lane reads the `tsvector` of
-- every chunk that holds a query's rarest word (ts_rank picks the candidates); kept out of
-- line, each costs a TOAST lookup (PostgreSQL moved it there once body and terms passed
-- about 2 kB, most chat turns): 16 ms for a word in 2,000 of 100,000 chunks, 4.5 ms with
-- it in the row. MAIN keeps it in the row (compressed if need be); the vector, which no
-- search reads from the row and which does not compress, goes out of line first.
-- Rows written before keep their place until they are written again.
ALTER TABLE search_chunks ALTER COLUMN terms SET STORAGE MAIN;
ALTER TABLE search_chunks ALTER COLUMN vector SET STORAGE EXTERNAL;
