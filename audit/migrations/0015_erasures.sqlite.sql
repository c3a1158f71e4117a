-- Frozen: the statements this migration executes on sqlite, in order (audit.frozen_sql).
CREATE TRIGGER audit_erasure_no_update BEFORE UPDATE ON audit_erasure
        BEGIN SELECT RAISE(ABORT, 'audit rows are append-only'); END
-- statement
CREATE TRIGGER audit_erasure_no_delete BEFORE DELETE ON audit_erasure
        BEGIN SELECT RAISE(ABORT, 'audit rows are append-only'); END
-- statement
CREATE TRIGGER audit_trail_update BEFORE UPDATE ON audit_trail
   WHEN (OLD.status <> 'open' OR NEW.id <> OLD.id OR NEW.job_id <> OLD.job_id
     OR NEW.attempt <> OLD.attempt OR NEW.genesis_hash <> OLD.genesis_hash
     OR NEW.format_version <> OLD.format_version OR NEW.salt <> OLD.salt
     OR NEW.previous_id IS NOT OLD.previous_id)
    AND NOT (OLD.salt <> '' AND NEW.salt = '' AND NEW.id IS OLD.id AND NEW.job_id IS OLD.job_id
     AND NEW.attempt IS OLD.attempt AND NEW.previous_id IS OLD.previous_id
     AND NEW.format_version IS OLD.format_version AND NEW.batch_id IS OLD.batch_id
     AND NEW.genesis_hash IS OLD.genesis_hash AND NEW.status IS OLD.status
     AND NEW.outcome IS OLD.outcome AND NEW.record_count IS OLD.record_count
     AND NEW.head_hash IS OLD.head_hash AND NEW.created_at IS OLD.created_at
     AND NEW.sealed_at IS OLD.sealed_at
     AND EXISTS (SELECT 1 FROM audit_erasure WHERE trail_id = OLD.id)) BEGIN
    SELECT RAISE(ABORT, 'a sealed trail, or a trail identity, cannot change');
END
-- statement
CREATE TRIGGER audit_decisionrecord_no_update BEFORE UPDATE ON audit_decisionrecord
   WHEN NOT (NEW.openings = '' AND NEW.id IS OLD.id AND NEW.trail_id IS OLD.trail_id
     AND NEW.seq IS OLD.seq AND NEW.kind IS OLD.kind AND NEW.payload IS OLD.payload
     AND NEW.prev_hash IS OLD.prev_hash AND NEW.record_hash IS OLD.record_hash
     AND NEW.created_at IS OLD.created_at
     AND EXISTS (SELECT 1 FROM audit_erasure WHERE trail_id = OLD.trail_id))
BEGIN SELECT RAISE(ABORT, 'audit rows are append-only'); END
