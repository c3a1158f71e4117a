-- Frozen: the statements this migration executes on sqlite, in order (audit.frozen_sql).
ALTER TABLE audit_checkpoint ADD COLUMN receipt_signature BLOB NULL
