-- Frozen: the statements this migration executes on postgresql, in order (audit.frozen_sql).
ALTER TABLE audit_checkpoint ADD COLUMN receipt_signature bytea NULL
