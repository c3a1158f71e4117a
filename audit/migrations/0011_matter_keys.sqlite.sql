-- Frozen: the statements this migration executes on sqlite, in order (audit.frozen_sql).
CREATE TRIGGER audit_matterkey_no_update BEFORE UPDATE ON audit_matterkey
        BEGIN SELECT RAISE(ABORT, 'audit rows are append-only'); END
-- statement
CREATE TRIGGER audit_matterkey_no_delete BEFORE DELETE ON audit_matterkey
        BEGIN SELECT RAISE(ABORT, 'audit rows are append-only'); END
