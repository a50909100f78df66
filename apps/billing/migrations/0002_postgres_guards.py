"""PostgreSQL guards for the money invariants, so they hold even for writes that bypass the
services (a shell, a bad migration, a racing request):

- rate cards of one GPU model never overlap in time (exclusion constraint);
- a closed billing period never reopens, and its ledger entries, adjustments and budgets are
  never inserted, changed or deleted (triggers).

SQLite (the demo) relies on the services, which check the same rules inside a transaction.
"""

from django.contrib.postgres.operations import BtreeGistExtension
from django.db import migrations

FORWARD = """
ALTER TABLE billing_ratecard ADD CONSTRAINT ratecard_no_overlap_per_model
  EXCLUDE USING gist (gpu_model_id WITH =,
                      tstzrange(effective_from, effective_to, '[)') WITH &&);

CREATE FUNCTION billing_period_stays_closed() RETURNS trigger AS $$
BEGIN
  IF OLD.status = 'closed' THEN
    RAISE EXCEPTION 'billing period % is closed and cannot change', OLD.month
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql;

CREATE TRIGGER billing_period_closed_guard BEFORE UPDATE OR DELETE ON billing_billingperiod
  FOR EACH ROW EXECUTE FUNCTION billing_period_stays_closed();

CREATE FUNCTION billing_row_in_open_period() RETURNS trigger AS $$
DECLARE
  row_period bigint;
BEGIN
  IF TG_OP = 'DELETE' THEN row_period := OLD.period_id; ELSE row_period := NEW.period_id; END IF;
  IF EXISTS (SELECT 1 FROM billing_billingperiod WHERE id = row_period AND status = 'closed')
     OR (TG_OP = 'UPDATE' AND EXISTS (
         SELECT 1 FROM billing_billingperiod WHERE id = OLD.period_id AND status = 'closed')) THEN
    RAISE EXCEPTION '% on % refused: its billing period is closed', TG_OP, TG_TABLE_NAME
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql;

-- Ledger inserts come by the hundred thousand (metering): one check per statement, not per row.
CREATE FUNCTION billing_ledger_insert_in_open_period() RETURNS trigger AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM new_rows n JOIN billing_billingperiod p ON p.id = n.period_id
             WHERE p.status = 'closed') THEN
    RAISE EXCEPTION 'INSERT on billing_ledgerentry refused: its billing period is closed'
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  RETURN NULL;
END $$ LANGUAGE plpgsql;

CREATE TRIGGER ledger_insert_closed_period_guard AFTER INSERT ON billing_ledgerentry
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
  EXECUTE FUNCTION billing_ledger_insert_in_open_period();
CREATE TRIGGER ledger_closed_period_guard BEFORE UPDATE OR DELETE ON billing_ledgerentry
  FOR EACH ROW EXECUTE FUNCTION billing_row_in_open_period();
CREATE TRIGGER adjustment_closed_period_guard BEFORE INSERT OR UPDATE OR DELETE
  ON billing_adjustment FOR EACH ROW EXECUTE FUNCTION billing_row_in_open_period();
CREATE TRIGGER budget_closed_period_guard BEFORE INSERT OR UPDATE OR DELETE ON billing_budget
  FOR EACH ROW EXECUTE FUNCTION billing_row_in_open_period();
"""

BACKWARD = """
DROP TRIGGER IF EXISTS budget_closed_period_guard ON billing_budget;
DROP TRIGGER IF EXISTS adjustment_closed_period_guard ON billing_adjustment;
DROP TRIGGER IF EXISTS ledger_closed_period_guard ON billing_ledgerentry;
DROP TRIGGER IF EXISTS ledger_insert_closed_period_guard ON billing_ledgerentry;
DROP FUNCTION IF EXISTS billing_ledger_insert_in_open_period();
DROP FUNCTION IF EXISTS billing_row_in_open_period();
DROP TRIGGER IF EXISTS billing_period_closed_guard ON billing_billingperiod;
DROP FUNCTION IF EXISTS billing_period_stays_closed();
ALTER TABLE billing_ratecard DROP CONSTRAINT IF EXISTS ratecard_no_overlap_per_model;
"""


def forward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FORWARD, params=None)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(BACKWARD, params=None)


class Migration(migrations.Migration):
    dependencies = [("billing", "0001_initial")]

    operations = [
        BtreeGistExtension(),
        migrations.RunPython(forward, backward),
    ]
