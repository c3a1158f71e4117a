-- Frozen: the statements this migration executes on sqlite, in order (audit.frozen_sql).
CREATE TRIGGER reviewers_custodyevent_no_update BEFORE UPDATE ON reviewers_custodyevent
        BEGIN SELECT RAISE(ABORT, 'audit rows are append-only'); END
-- statement
CREATE TRIGGER reviewers_custodyevent_no_delete BEFORE DELETE ON reviewers_custodyevent
        BEGIN SELECT RAISE(ABORT, 'audit rows are append-only'); END
