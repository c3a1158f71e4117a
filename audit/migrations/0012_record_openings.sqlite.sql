-- Frozen: the statements this migration executes on sqlite, in order (audit.frozen_sql).
ALTER TABLE audit_decisionrecord ADD COLUMN openings text NOT NULL DEFAULT ''
