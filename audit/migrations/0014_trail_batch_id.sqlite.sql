-- Frozen: the statements this migration executes on sqlite, in order (audit.frozen_sql).
ALTER TABLE audit_trail ADD COLUMN batch_id varchar(40) NOT NULL DEFAULT ''
