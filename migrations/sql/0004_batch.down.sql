DROP TABLE IF EXISTS tributary_batch_object;
DROP TABLE IF EXISTS tributary_batch_item;
