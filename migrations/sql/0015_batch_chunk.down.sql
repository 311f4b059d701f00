-- Back to one row per item: every chunk of several items is split into its
-- remaining items, which take new ids (after every existing one). A batch
-- claimed over such a chunk's id then finds it gone and writes what is left
-- of its range; the split items follow in later objects, each once.
ALTER TABLE tributary_batch_chunk DROP CONSTRAINT tributary_batch_chunk_done_check;

INSERT INTO tributary_batch_chunk (stream, payload, byte_size, created_at)
SELECT c.stream, convert_to(l.line, 'UTF8'), octet_length(convert_to(l.line, 'UTF8')), c.created_at
FROM tributary_batch_chunk c
CROSS JOIN LATERAL string_to_table(convert_from(c.payload, 'UTF8'), E'\n') WITH ORDINALITY AS l(line, n)
WHERE (c.item_count > 1 OR c.done_items > 0) AND l.n > c.done_items
ORDER BY c.id, l.n;

DELETE FROM tributary_batch_chunk WHERE item_count > 1 OR done_items > 0;

ALTER TABLE tributary_batch_chunk ALTER COLUMN payload SET STORAGE EXTENDED;
ALTER TABLE tributary_batch_chunk
    DROP COLUMN item_count,
    DROP COLUMN done_items,
    DROP COLUMN done_bytes;
ALTER SEQUENCE tributary_batch_chunk_id_seq RENAME TO tributary_batch_item_id_seq;
ALTER INDEX tributary_batch_chunk_pkey RENAME TO tributary_batch_item_pkey;
ALTER TABLE tributary_batch_chunk RENAME TO tributary_batch_item;
