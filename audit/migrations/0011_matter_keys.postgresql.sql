-- Frozen: the statements this migration executes on postgresql, in order (audit.frozen_sql).
CREATE TRIGGER audit_matterkey_no_change BEFORE UPDATE OR DELETE ON audit_matterkey FOR EACH ROW EXECUTE FUNCTION audit_reject_change()
-- statement
ALTER TABLE audit_matterkey ENABLE ALWAYS TRIGGER audit_matterkey_no_change
-- statement
CREATE TRIGGER audit_matterkey_no_truncate BEFORE TRUNCATE ON audit_matterkey FOR EACH STATEMENT EXECUTE FUNCTION audit_reject_change()
-- statement
ALTER TABLE audit_matterkey ENABLE ALWAYS TRIGGER audit_matterkey_no_truncate
