import pytest

from movements.compiler import validate_template
from movements.models import RouteTemplate
from movements.services import route_templates_sync


@pytest.fixture
def install_template(db):
    """Load a template definition as a reviewed version, as if from its YAML file."""

    def _install(definition: dict) -> RouteTemplate:
        route_templates_sync()  # the shipped ones first, so lookups do not reload files
        clean = validate_template(definition)
        return RouteTemplate.objects.create(
            key=clean["key"], version=clean["version"], checksum="test", definition=clean
        )

    return _install


@pytest.fixture
def branching_template(install_template):
    """withdraw -> (bridge_observe if bridge) -> deposit_observe, and screening in parallel."""
    return install_template(
        {
            "key": "branching",
            "version": 1,
            "params": {"bridge": {"type": "boolean", "default": False}},
            "nodes": [
                {
                    "key": "withdraw",
                    "kind": "ACTION",
                    "executor": "cex_withdraw",
                    "has_side_effect": True,
                    "on_success": ["bridge_observe", "screening_observe"],
                },
                {
                    "key": "bridge_observe",
                    "kind": "OBSERVE",
                    "executor": "chain_tx_observe",
                    "when": {"param": "bridge", "equals": True},
                    "on_success": ["bridge_settle_observe"],
                },
                {
                    "key": "bridge_settle_observe",
                    "kind": "OBSERVE",
                    "executor": "chain_tx_observe",
                    "on_success": ["deposit_observe"],
                },
                {
                    "key": "screening_observe",
                    "kind": "OBSERVE",
                    "executor": "chain_tx_observe",
                    "on_success": ["deposit_observe"],
                },
                {"key": "deposit_observe", "kind": "OBSERVE", "executor": "cex_deposit_observe"},
            ],
        }
    )
