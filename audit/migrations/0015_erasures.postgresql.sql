-- Frozen: the statements this migration executes on postgresql, in order (audit.frozen_sql).
CREATE TRIGGER audit_erasure_no_change BEFORE UPDATE OR DELETE ON audit_erasure FOR EACH ROW EXECUTE FUNCTION audit_reject_change()
-- statement
ALTER TABLE audit_erasure ENABLE ALWAYS TRIGGER audit_erasure_no_change
-- statement
CREATE TRIGGER audit_erasure_no_truncate BEFORE TRUNCATE ON audit_erasure FOR EACH STATEMENT EXECUTE FUNCTION audit_reject_change()
-- statement
ALTER TABLE audit_erasure ENABLE ALWAYS TRIGGER audit_erasure_no_truncate
-- statement
CREATE OR REPLACE FUNCTION audit_trail_check_update() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    erased audit_trail%ROWTYPE;
BEGIN
    -- A destruction blanks the salt of an erased trail, open or sealed, and nothing else.
    erased := OLD;
    erased.salt := '';
    IF OLD.salt <> '' AND NEW IS NOT DISTINCT FROM erased
       AND EXISTS (SELECT 1 FROM audit_erasure WHERE trail_id = OLD.id) THEN
        RETURN NEW;
    END IF;
    IF OLD.status <> 'open' THEN
        RAISE EXCEPTION 'trail % is sealed and cannot change', OLD.id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NEW.id <> OLD.id OR NEW.job_id <> OLD.job_id OR NEW.attempt <> OLD.attempt
       OR NEW.genesis_hash <> OLD.genesis_hash OR NEW.format_version <> OLD.format_version
       OR NEW.salt <> OLD.salt OR NEW.previous_id IS DISTINCT FROM OLD.previous_id THEN
        RAISE EXCEPTION 'the identity of trail % cannot change', OLD.id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END $$;
-- statement
CREATE OR REPLACE FUNCTION audit_record_check_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    erased audit_decisionrecord%ROWTYPE;
BEGIN
    -- A destruction blanks the openings of an erased trail's records, and nothing else.
    IF TG_OP = 'UPDATE' THEN
        erased := OLD;
        erased.openings := '';
        IF NEW IS NOT DISTINCT FROM erased
           AND EXISTS (SELECT 1 FROM audit_erasure WHERE trail_id = OLD.trail_id) THEN
            RETURN NEW;
        END IF;
    END IF;
    RAISE EXCEPTION 'audit rows are append-only: % on % rejected', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END $$;
-- statement
CREATE OR REPLACE TRIGGER audit_decisionrecord_no_change BEFORE UPDATE OR DELETE ON audit_decisionrecord FOR EACH ROW EXECUTE FUNCTION audit_record_check_change()
-- statement
ALTER TABLE audit_decisionrecord ENABLE ALWAYS TRIGGER audit_decisionrecord_no_change
