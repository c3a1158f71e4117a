-- Frozen: the statements this migration executes on sqlite, in order (audit.frozen_sql).
CREATE TRIGGER reviewers_trailverification_no_update BEFORE UPDATE ON reviewers_trailverification
        BEGIN SELECT RAISE(ABORT, 'audit rows are append-only'); END
-- statement
CREATE TRIGGER reviewers_trailverification_no_delete BEFORE DELETE ON reviewers_trailverification
        BEGIN SELECT RAISE(ABORT, 'audit rows are append-only'); END
-- statement
CREATE TRIGGER reviewers_signoff_no_update BEFORE UPDATE ON reviewers_signoff
        BEGIN SELECT RAISE(ABORT, 'audit rows are append-only'); END
-- statement
CREATE TRIGGER reviewers_signoff_no_delete BEFORE DELETE ON reviewers_signoff
        BEGIN SELECT RAISE(ABORT, 'audit rows are append-only'); END
