-- Frozen: the statements this migration executes on postgresql, in order (audit.frozen_sql).
CREATE TRIGGER reviewers_trailverification_no_change BEFORE UPDATE OR DELETE ON reviewers_trailverification FOR EACH ROW EXECUTE FUNCTION audit_reject_change()
-- statement
ALTER TABLE reviewers_trailverification ENABLE ALWAYS TRIGGER reviewers_trailverification_no_change
-- statement
CREATE TRIGGER reviewers_trailverification_no_truncate BEFORE TRUNCATE ON reviewers_trailverification FOR EACH STATEMENT EXECUTE FUNCTION audit_reject_change()
-- statement
ALTER TABLE reviewers_trailverification ENABLE ALWAYS TRIGGER reviewers_trailverification_no_truncate
-- statement
CREATE TRIGGER reviewers_signoff_no_change BEFORE UPDATE OR DELETE ON reviewers_signoff FOR EACH ROW EXECUTE FUNCTION audit_reject_change()
-- statement
ALTER TABLE reviewers_signoff ENABLE ALWAYS TRIGGER reviewers_signoff_no_change
-- statement
CREATE TRIGGER reviewers_signoff_no_truncate BEFORE TRUNCATE ON reviewers_signoff FOR EACH STATEMENT EXECUTE FUNCTION audit_reject_change()
-- statement
ALTER TABLE reviewers_signoff ENABLE ALWAYS TRIGGER reviewers_signoff_no_truncate
