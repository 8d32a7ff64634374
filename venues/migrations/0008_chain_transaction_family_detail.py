"""Chain transactions: the EVM-shaped columns (gas_limit, max_fee_per_gas,
max_priority_fee_per_gas) move into the family's detail (``family`` + ``family_detail``,
checked against the family's schema in ``qtg.core.chains``), every existing row carried across;
Solana rows get their blockhash and last valid height there too. Reversible: backwards, the
columns come back filled from the detail, then the detail goes.

A row's family is read from what it holds: an EVM transaction always has a nonce (allocated
when it is created) or EIP-1559 fees; a Solana one has neither and stores its blockhash.
"""

import django.core.serializers.json
from django.db import migrations, models

EVM_FIELDS = ("gas_limit", "max_fee_per_gas", "max_priority_fee_per_gas")
BATCH = 500


def _family(tx) -> str:
    if tx.nonce is not None or any(getattr(tx, name) is not None for name in EVM_FIELDS):
        return "evm"
    if "blockhash" in (tx.unsigned or {}):
        return "solana"
    return ""


def columns_to_detail(apps, schema_editor):
    ChainTransaction = apps.get_model("venues", "ChainTransaction")
    rows = ChainTransaction.objects.order_by("pk")
    changed = []
    for tx in rows.iterator(chunk_size=BATCH):
        tx.family = _family(tx)
        if tx.family == "evm":
            tx.family_detail = {
                name: str(int(getattr(tx, name)))
                for name in EVM_FIELDS
                if getattr(tx, name) is not None
            }
        elif tx.family == "solana":
            unsigned = tx.unsigned or {}
            tx.family_detail = {"recent_blockhash": str(unsigned["blockhash"])}
            if unsigned.get("last_valid_block_height") is not None:
                height = int(unsigned["last_valid_block_height"])
                tx.family_detail["last_valid_block_height"] = str(height)
        changed.append(tx)
        if len(changed) >= BATCH:
            ChainTransaction.objects.bulk_update(changed, ["family", "family_detail"])
            changed = []
    ChainTransaction.objects.bulk_update(changed, ["family", "family_detail"])


def detail_to_columns(apps, schema_editor):
    ChainTransaction = apps.get_model("venues", "ChainTransaction")
    rows = ChainTransaction.objects.filter(family="evm").order_by("pk")
    changed = []
    for tx in rows.iterator(chunk_size=BATCH):
        detail = tx.family_detail or {}
        for name in EVM_FIELDS:
            setattr(tx, name, int(detail[name]) if detail.get(name) not in (None, "") else None)
        changed.append(tx)
        if len(changed) >= BATCH:
            ChainTransaction.objects.bulk_update(changed, list(EVM_FIELDS))
            changed = []
    ChainTransaction.objects.bulk_update(changed, list(EVM_FIELDS))


class Migration(migrations.Migration):
    dependencies = [
        ("venues", "0007_ledger_chain"),
    ]

    operations = [
        migrations.AddField(
            model_name="chaintransaction",
            name="family",
            field=models.CharField(blank=True, max_length=16),
        ),
        migrations.AddField(
            model_name="chaintransaction",
            name="family_detail",
            field=models.JSONField(
                blank=True, default=dict, encoder=django.core.serializers.json.DjangoJSONEncoder
            ),
        ),
        migrations.RunPython(columns_to_detail, detail_to_columns),
        migrations.RemoveField(model_name="chaintransaction", name="gas_limit"),
        migrations.RemoveField(model_name="chaintransaction", name="max_fee_per_gas"),
        migrations.RemoveField(model_name="chaintransaction", name="max_priority_fee_per_gas"),
    ]
