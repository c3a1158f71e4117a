-- Frozen: the statements this migration executes on postgresql, in order (audit.frozen_sql).
CREATE OR REPLACE FUNCTION audit_reject_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit rows are append-only: % on % rejected', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END $$;

CREATE OR REPLACE FUNCTION audit_trail_check_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status <> 'open' THEN
        RAISE EXCEPTION 'trail % is sealed and cannot change', OLD.id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NEW.id <> OLD.id OR NEW.job_id <> OLD.job_id OR NEW.attempt <> OLD.attempt
       OR NEW.genesis_hash <> OLD.genesis_hash THEN
        RAISE EXCEPTION 'the identity of trail % cannot change', OLD.id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION audit_record_check_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    trail_status text;
    expected_prev text;
    head_seq bigint;
BEGIN
    SELECT status, genesis_hash INTO trail_status, expected_prev
        FROM audit_trail WHERE id = NEW.trail_id;
    IF trail_status IS DISTINCT FROM 'open' THEN
        RAISE EXCEPTION 'trail % is missing or sealed', NEW.trail_id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    SELECT seq, record_hash INTO head_seq, expected_prev FROM (
        SELECT seq, record_hash FROM audit_decisionrecord WHERE trail_id = NEW.trail_id
        UNION ALL SELECT -1, expected_prev
    ) AS chain ORDER BY seq DESC LIMIT 1;
    IF NEW.seq <> head_seq + 1 THEN
        RAISE EXCEPTION 'record seq % of trail % is not head+1 (%)', NEW.seq, NEW.trail_id,
            head_seq + 1 USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF NEW.prev_hash <> expected_prev THEN
        RAISE EXCEPTION 'record % of trail % does not chain to its predecessor', NEW.seq,
            NEW.trail_id USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION audit_ledger_check_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    head_seq bigint;
    expected_prev text;
BEGIN
    SELECT seq, entry_hash INTO head_seq, expected_prev FROM (
        SELECT seq, entry_hash FROM audit_ledgerentry
        UNION ALL SELECT -1, '348106593184401aed1d166212e81caeaf3fcadea2e1346c7850a44f331851b2'
    ) AS chain ORDER BY seq DESC LIMIT 1;
    IF NEW.seq <> head_seq + 1 OR NEW.prev_hash <> expected_prev THEN
        RAISE EXCEPTION 'ledger entry % does not extend the ledger head', NEW.seq
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END $$;
-- statement
CREATE TRIGGER audit_record_insert BEFORE INSERT ON audit_decisionrecord FOR EACH ROW EXECUTE FUNCTION audit_record_check_insert()
-- statement
ALTER TABLE audit_decisionrecord ENABLE ALWAYS TRIGGER audit_record_insert
-- statement
CREATE TRIGGER audit_ledger_insert BEFORE INSERT ON audit_ledgerentry FOR EACH ROW EXECUTE FUNCTION audit_ledger_check_insert()
-- statement
ALTER TABLE audit_ledgerentry ENABLE ALWAYS TRIGGER audit_ledger_insert
-- statement
CREATE TRIGGER audit_trail_update BEFORE UPDATE ON audit_trail FOR EACH ROW EXECUTE FUNCTION audit_trail_check_update()
-- statement
ALTER TABLE audit_trail ENABLE ALWAYS TRIGGER audit_trail_update
-- statement
CREATE TRIGGER audit_trail_delete BEFORE DELETE ON audit_trail FOR EACH ROW EXECUTE FUNCTION audit_reject_change()
-- statement
ALTER TABLE audit_trail ENABLE ALWAYS TRIGGER audit_trail_delete
-- statement
CREATE TRIGGER audit_trail_truncate BEFORE TRUNCATE ON audit_trail FOR EACH STATEMENT EXECUTE FUNCTION audit_reject_change()
-- statement
ALTER TABLE audit_trail ENABLE ALWAYS TRIGGER audit_trail_truncate
-- statement
CREATE TRIGGER audit_decisionrecord_no_change BEFORE UPDATE OR DELETE ON audit_decisionrecord FOR EACH ROW EXECUTE FUNCTION audit_reject_change()
-- statement
ALTER TABLE audit_decisionrecord ENABLE ALWAYS TRIGGER audit_decisionrecord_no_change
-- statement
CREATE TRIGGER audit_decisionrecord_no_truncate BEFORE TRUNCATE ON audit_decisionrecord FOR EACH STATEMENT EXECUTE FUNCTION audit_reject_change()
-- statement
ALTER TABLE audit_decisionrecord ENABLE ALWAYS TRIGGER audit_decisionrecord_no_truncate
-- statement
CREATE TRIGGER audit_ledgerentry_no_change BEFORE UPDATE OR DELETE ON audit_ledgerentry FOR EACH ROW EXECUTE FUNCTION audit_reject_change()
-- statement
ALTER TABLE audit_ledgerentry ENABLE ALWAYS TRIGGER audit_ledgerentry_no_change
-- statement
CREATE TRIGGER audit_ledgerentry_no_truncate BEFORE TRUNCATE ON audit_ledgerentry FOR EACH STATEMENT EXECUTE FUNCTION audit_reject_change()
-- statement
ALTER TABLE audit_ledgerentry ENABLE ALWAYS TRIGGER audit_ledgerentry_no_truncate
-- statement
CREATE TRIGGER audit_verificationrun_no_change BEFORE UPDATE OR DELETE ON audit_verificationrun FOR EACH ROW EXECUTE FUNCTION audit_reject_change()
-- statement
ALTER TABLE audit_verificationrun ENABLE ALWAYS TRIGGER audit_verificationrun_no_change
-- statement
CREATE TRIGGER audit_verificationrun_no_truncate BEFORE TRUNCATE ON audit_verificationrun FOR EACH STATEMENT EXECUTE FUNCTION audit_reject_change()
-- statement
ALTER TABLE audit_verificationrun ENABLE ALWAYS TRIGGER audit_verificationrun_no_truncate
