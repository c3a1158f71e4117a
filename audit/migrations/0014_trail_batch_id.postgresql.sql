-- Frozen: the statements this migration executes on postgresql, in order (audit.frozen_sql).
ALTER TABLE audit_trail ADD COLUMN batch_id varchar(40) NOT NULL DEFAULT ''
