-- Frozen: the statements this migration executes on sqlite, in order (audit.frozen_sql).
CREATE TRIGGER reviewers_custodypoint_no_update BEFORE UPDATE ON reviewers_custodypoint
        BEGIN SELECT RAISE(ABORT, 'audit rows are append-only'); END
-- statement
CREATE TRIGGER reviewers_custodypoint_no_delete BEFORE DELETE ON reviewers_custodypoint
        BEGIN SELECT RAISE(ABORT, 'audit rows are append-only'); END
