"""Route templates: the shipped files compile; every malformed template is refused with a
message that names the problem; reviewed versions are immutable."""

import copy
from decimal import Decimal

import pytest

from movements.compiler import compile_plan, validate_template
from movements.models import RouteTemplate
from movements.services import route_templates_sync
from qtg.core.errors import TemplateInvalid

GOOD = {
    "key": "probe",
    "version": 1,
    "params": {"network": {"type": "string", "default": "ethereum"}},
    "nodes": [
        {
            "key": "withdraw",
            "kind": "ACTION",
            "executor": "cex_withdraw",
            "has_side_effect": True,
            "config": {"to": "${destination}", "net": "${network}"},
            "on_success": ["deposit_observe"],
        },
        {"key": "deposit_observe", "kind": "OBSERVE", "executor": "cex_deposit_observe"},
    ],
}


def broken(mutate):
    definition = copy.deepcopy(GOOD)
    mutate(definition)
    return definition


@pytest.mark.parametrize(
    ("definition", "problem"),
    [
        (broken(lambda d: d.update(nodes=[])), "empty plan"),
        (broken(lambda d: d["nodes"][1].update(key="withdraw")), "duplicate node key 'withdraw'"),
        (
            broken(lambda d: d["nodes"][1].update(executor="teleport")),
            "unknown executor 'teleport'",
        ),
        (
            broken(lambda d: d["nodes"][0].update(on_success=["nowhere"])),
            "dangling edge 'withdraw' -> 'nowhere'",
        ),
        (
            broken(lambda d: d["nodes"][1].update(on_success=["withdraw"])),
            "cycle through withdraw, deposit_observe",
        ),
        (
            broken(lambda d: d["nodes"].append({"key": "release", "kind": "MANUAL_GATE"})),
            "manual-gate node 'release' must have a key starting with 'manual_'",
        ),
        (
            broken(lambda d: d["nodes"][1].update(key="manual_observe")),
            "starts with 'manual_' but is not a MANUAL_GATE",
        ),
        (broken(lambda d: d["nodes"][1].update(kind="TELEPORT")), "kind must be one of"),
        (
            broken(lambda d: d["nodes"][1].update(has_side_effect=True)),
            "only ACTION nodes may have side effects",
        ),
        (
            broken(lambda d: d["nodes"][0].update(config={"to": "${nope}"})),
            "undeclared param(s) nope",
        ),
        (broken(lambda d: d["nodes"][0].update(colour="red")), "unknown field(s) colour"),
        (broken(lambda d: d.update(version=0)), "version must be a positive integer"),
        (
            broken(lambda d: d["nodes"][1].update(when={"param": "ghost", "equals": 1})),
            "undeclared param 'ghost'",
        ),
    ],
)
def test_a_malformed_template_is_refused_with_its_problem_named(definition, problem):
    with pytest.raises(TemplateInvalid) as caught:
        validate_template(definition)
    assert problem in caught.value.message
    assert "probe" in caught.value.message or definition.get("key") is None


def test_compiling_binds_params_fields_and_copies_the_side_effect_flag():
    plan = compile_plan(
        validate_template(GOOD),
        asset="USDC",
        amount=Decimal("5"),
        source="a",
        destination="wallet-9",
        params={},
    )

    withdraw = plan.nodes[0]
    assert withdraw.config == {"to": "wallet-9", "net": "ethereum"}
    assert withdraw.has_side_effect is True
    assert plan.nodes[1].has_side_effect is False
    assert plan.edges == [("withdraw", "deposit_observe")]
    assert plan.roots() == ["withdraw"]
    assert plan.params == {"network": "ethereum"}


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ({"colour": "red"}, "unknown param(s) colour"),
        ({"network": 7}, "param 'network' must be a string"),
        ({"sandbox": "boom"}, "param 'sandbox' must be a mapping"),
    ],
)
def test_request_params_the_template_does_not_accept_are_refused(params, problem):
    with pytest.raises(TemplateInvalid) as caught:
        compile_plan(
            validate_template(GOOD),
            asset="USDC",
            amount=Decimal("1"),
            source="a",
            destination="b",
            params=params,
        )
    assert problem in caught.value.message


@pytest.mark.django_db
def test_the_shipped_templates_load_with_their_contract_node_keys():
    loaded = {t.key: t for t in route_templates_sync()}

    def keys(key):
        return [n["key"] for n in loaded[key].definition["nodes"]]

    assert keys("cex_to_cex") == ["withdraw", "withdraw_observe", "deposit_observe"]
    assert keys("cctp") == ["burn", "attestation_observe", "mint", "mint_observe"]
    assert keys("cex_to_cex_gated") == ["withdraw", "manual_release", "deposit_observe"]
    split = loaded["split_join"].definition["nodes"]
    join = [n["key"] for n in split if sum(n["key"] in m["on_success"] for m in split) > 1]
    assert join == ["deposit_observe"]


@pytest.mark.django_db
def test_loading_twice_keeps_one_row_per_reviewed_version():
    route_templates_sync()
    route_templates_sync()

    assert RouteTemplate.objects.filter(key="cex_to_cex").count() == 1


@pytest.mark.django_db
def test_a_template_changed_without_a_version_bump_is_refused(tmp_path, settings):
    source = settings.QTG_ROUTE_TEMPLATE_DIR / "cex_to_cex.yaml"
    (tmp_path / "cex_to_cex.yaml").write_text(source.read_text())
    route_templates_sync(directory=tmp_path)
    (tmp_path / "cex_to_cex.yaml").write_text(source.read_text() + "\n# edited\n")

    with pytest.raises(TemplateInvalid, match="bump its version"):
        route_templates_sync(directory=tmp_path)


@pytest.mark.django_db
def test_a_new_version_becomes_a_new_row(tmp_path, settings):
    source = settings.QTG_ROUTE_TEMPLATE_DIR / "cex_to_cex.yaml"
    (tmp_path / "cex_to_cex.yaml").write_text(source.read_text())
    route_templates_sync(directory=tmp_path)
    (tmp_path / "cex_to_cex.yaml").write_text(
        source.read_text().replace("version: 1", "version: 2")
    )

    route_templates_sync(directory=tmp_path)

    assert list(
        RouteTemplate.objects.filter(key="cex_to_cex").values_list("version", flat=True)
    ) == [2, 1]
