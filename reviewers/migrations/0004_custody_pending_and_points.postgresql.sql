-- Frozen: the statements this migration executes on postgresql, in order (audit.frozen_sql).
CREATE TRIGGER reviewers_custodypoint_no_change BEFORE UPDATE OR DELETE ON reviewers_custodypoint FOR EACH ROW EXECUTE FUNCTION audit_reject_change()
-- statement
ALTER TABLE reviewers_custodypoint ENABLE ALWAYS TRIGGER reviewers_custodypoint_no_change
-- statement
CREATE TRIGGER reviewers_custodypoint_no_truncate BEFORE TRUNCATE ON reviewers_custodypoint FOR EACH STATEMENT EXECUTE FUNCTION audit_reject_change()
-- statement
ALTER TABLE reviewers_custodypoint ENABLE ALWAYS TRIGGER reviewers_custodypoint_no_truncate
