-- Frozen: the statements this migration executes on sqlite, in order (audit.frozen_sql).
CREATE TRIGGER audit_record_insert BEFORE INSERT ON audit_decisionrecord BEGIN
            SELECT RAISE(ABORT, 'trail is missing or sealed')
             WHERE COALESCE((SELECT status FROM audit_trail WHERE id = NEW.trail_id), '') <> 'open';
            SELECT RAISE(ABORT, 'record seq is not head+1')
             WHERE NEW.seq <> (SELECT COALESCE(MAX(seq), -1) + 1 FROM audit_decisionrecord
                               WHERE trail_id = NEW.trail_id);
            SELECT RAISE(ABORT, 'record does not chain to its predecessor')
             WHERE NEW.prev_hash <> COALESCE(
                (SELECT record_hash FROM audit_decisionrecord
                  WHERE trail_id = NEW.trail_id AND seq = NEW.seq - 1),
                (SELECT genesis_hash FROM audit_trail WHERE id = NEW.trail_id));
        END
-- statement
CREATE TRIGGER audit_ledger_insert BEFORE INSERT ON audit_ledgerentry BEGIN
            SELECT RAISE(ABORT, 'ledger entry does not extend the ledger head')
             WHERE NEW.seq <> (SELECT COALESCE(MAX(seq), -1) + 1 FROM audit_ledgerentry)
                OR NEW.prev_hash <> COALESCE(
                    (SELECT entry_hash FROM audit_ledgerentry ORDER BY seq DESC LIMIT 1),
                    '348106593184401aed1d166212e81caeaf3fcadea2e1346c7850a44f331851b2');
        END
-- statement
CREATE TRIGGER audit_trail_update BEFORE UPDATE ON audit_trail
           WHEN OLD.status <> 'open' OR NEW.id <> OLD.id OR NEW.job_id <> OLD.job_id
             OR NEW.attempt <> OLD.attempt OR NEW.genesis_hash <> OLD.genesis_hash BEGIN
            SELECT RAISE(ABORT, 'a sealed trail, or a trail identity, cannot change');
        END
-- statement
CREATE TRIGGER audit_trail_delete BEFORE DELETE ON audit_trail BEGIN
            SELECT RAISE(ABORT, 'audit rows are append-only');
        END
-- statement
CREATE TRIGGER audit_decisionrecord_no_update BEFORE UPDATE ON audit_decisionrecord
        BEGIN SELECT RAISE(ABORT, 'audit rows are append-only'); END
-- statement
CREATE TRIGGER audit_decisionrecord_no_delete BEFORE DELETE ON audit_decisionrecord
        BEGIN SELECT RAISE(ABORT, 'audit rows are append-only'); END
-- statement
CREATE TRIGGER audit_ledgerentry_no_update BEFORE UPDATE ON audit_ledgerentry
        BEGIN SELECT RAISE(ABORT, 'audit rows are append-only'); END
-- statement
CREATE TRIGGER audit_ledgerentry_no_delete BEFORE DELETE ON audit_ledgerentry
        BEGIN SELECT RAISE(ABORT, 'audit rows are append-only'); END
-- statement
CREATE TRIGGER audit_verificationrun_no_update BEFORE UPDATE ON audit_verificationrun
        BEGIN SELECT RAISE(ABORT, 'audit rows are append-only'); END
-- statement
CREATE TRIGGER audit_verificationrun_no_delete BEFORE DELETE ON audit_verificationrun
        BEGIN SELECT RAISE(ABORT, 'audit rows are append-only'); END
