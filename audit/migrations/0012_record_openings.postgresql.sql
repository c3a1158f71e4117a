-- Frozen: the statements this migration executes on postgresql, in order (audit.frozen_sql).
ALTER TABLE audit_decisionrecord ADD COLUMN openings text NOT NULL DEFAULT ''
