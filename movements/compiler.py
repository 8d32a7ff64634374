"""Route templates: validation of the reviewed YAML and compilation into a per-request plan.

A template is a graph of nodes joined by ``on_success`` edges. Validation refuses anything an
operator could not trust: unknown fields, duplicate keys, unknown executors, dangling edges,
cycles, manual gates not named ``manual_*`` (and the reverse), empty plans. Compilation binds a
validated template to one request's fields and params and yields an immutable plan snapshot.
Both are pure: they read no database rows and write nothing.
"""

import copy
import functools
import hashlib
import re
from collections import deque
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from movements.executors import is_registered
from qtg.core.errors import TemplateInvalid

KINDS = ("ACTION", "OBSERVE", "MANUAL_GATE")
MANUAL_PREFIX = "manual_"
MANUAL_GATE_EXECUTOR = "manual_gate"
KEY_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
PLACEHOLDER_RE = re.compile(r"\$\{([a-z_][a-z0-9_]*)\}")
# Fields every request has, usable as ${placeholders} in node config.
BUILTIN_PARAMS = ("asset", "amount", "source", "destination")
# Params every template accepts: fault injection for the sandbox venues.
RESERVED_PARAMS = ("sandbox",)
PARAM_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float, Decimal),
    "boolean": (bool,),
    "object": (dict,),
}
TEMPLATE_FIELDS = {"key", "version", "name", "description", "params", "nodes", "assets"}
NODE_FIELDS = {
    "key",
    "kind",
    "executor",
    "has_side_effect",
    "signing_required",
    "config",
    "when",
    "on_success",
    "description",
}
PARAM_FIELDS = {"type", "required", "default", "choices", "description"}
CONDITION_OPERATORS = ("equals", "not_equals", "in")


@dataclass(frozen=True)
class PlanNode:
    key: str
    kind: str
    executor: str
    has_side_effect: bool
    signing_required: bool
    config: dict[str, Any]
    condition: dict[str, Any] | None
    position: int


@dataclass(frozen=True)
class CompiledPlan:
    template_key: str
    template_version: int
    nodes: list[PlanNode]
    edges: list[tuple[str, str]]
    params: dict[str, Any] = field(default_factory=dict)

    def roots(self) -> list[str]:
        targets = {target for _, target in self.edges}
        return [node.key for node in self.nodes if node.key not in targets]


def _fail(template: str, problem: str) -> TemplateInvalid:
    return TemplateInvalid(f"route template {template}: {problem}", details={"template": template})


def _require_bool(name: str, node_key: str, raw: dict[str, Any], attr: str) -> bool:
    value = raw.get(attr, False)
    if not isinstance(value, bool):
        raise _fail(name, f"node {node_key!r}: {attr} must be true or false")
    return value


def _validate_params(name: str, raw: Any) -> dict[str, dict[str, Any]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise _fail(name, "params must be a mapping of name to declaration")
    params: dict[str, dict[str, Any]] = {}
    for param, decl in raw.items():
        if not isinstance(param, str) or not KEY_RE.match(param):
            raise _fail(name, f"param name {param!r} must be lower_snake_case")
        if param in BUILTIN_PARAMS or param in RESERVED_PARAMS:
            raise _fail(name, f"param {param!r} is reserved")
        decl = decl or {}
        if not isinstance(decl, dict):
            raise _fail(name, f"param {param!r}: declaration must be a mapping")
        unknown = set(decl) - PARAM_FIELDS
        if unknown:
            raise _fail(name, f"param {param!r}: unknown field(s) {', '.join(sorted(unknown))}")
        ptype = decl.get("type", "string")
        if ptype not in PARAM_TYPES:
            raise _fail(name, f"param {param!r}: unknown type {ptype!r}")
        params[param] = {
            "type": ptype,
            "required": bool(decl.get("required", False)),
            "default": decl.get("default"),
            "choices": decl.get("choices"),
        }
    return params


def _validate_condition(name: str, node_key: str, raw: Any, params: dict) -> dict | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or "param" not in raw:
        raise _fail(name, f"node {node_key!r}: when must name a param")
    operators = [op for op in CONDITION_OPERATORS if op in raw]
    if len(operators) != 1 or set(raw) - {"param", *CONDITION_OPERATORS}:
        raise _fail(
            name,
            f"node {node_key!r}: when takes a param and exactly one of "
            f"{', '.join(CONDITION_OPERATORS)}",
        )
    if raw["param"] not in params and raw["param"] not in BUILTIN_PARAMS:
        raise _fail(name, f"node {node_key!r}: when refers to undeclared param {raw['param']!r}")
    if operators[0] == "in" and not isinstance(raw["in"], list):
        raise _fail(name, f"node {node_key!r}: when.in must be a list")
    return dict(raw)


def _placeholders(value: Any) -> set[str]:
    if isinstance(value, str):
        return set(PLACEHOLDER_RE.findall(value))
    if isinstance(value, dict):
        return set().union(*(_placeholders(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(_placeholders(v) for v in value)) if value else set()
    return set()


def _find_cycle(keys: list[str], edges: list[tuple[str, str]]) -> list[str]:
    """Kahn's algorithm; returns the nodes left on a cycle (empty when acyclic)."""
    indegree = dict.fromkeys(keys, 0)
    successors: dict[str, list[str]] = {key: [] for key in keys}
    for source, target in edges:
        successors[source].append(target)
        indegree[target] += 1
    queue = deque(key for key in keys if indegree[key] == 0)
    seen = 0
    while queue:
        key = queue.popleft()
        seen += 1
        for successor in successors[key]:
            indegree[successor] -= 1
            if indegree[successor] == 0:
                queue.append(successor)
    return [key for key in keys if indegree[key] > 0] if seen != len(keys) else []


def validate_template(definition: Any) -> dict[str, Any]:
    """Check a parsed template and return its normalised form; raise TemplateInvalid if bad."""
    if not isinstance(definition, dict):
        raise TemplateInvalid("route template: the file must hold a mapping")
    name = str(definition.get("key", "<no key>"))
    unknown = set(definition) - TEMPLATE_FIELDS
    if unknown:
        raise _fail(name, f"unknown field(s) {', '.join(sorted(unknown))}")
    if not isinstance(definition.get("key"), str) or not KEY_RE.match(definition["key"]):
        raise _fail(name, "key must be lower_snake_case")
    version = definition.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise _fail(name, "version must be a positive integer")
    params = _validate_params(name, definition.get("params"))
    assets = definition.get("assets", [])
    if not isinstance(assets, list) or not all(
        isinstance(asset, str) and asset.strip() for asset in assets
    ):
        raise _fail(name, "assets must be a list of asset codes (the only assets it moves)")
    raw_nodes = definition.get("nodes")
    if not raw_nodes:
        raise _fail(name, "empty plan: a template needs at least one node")
    if not isinstance(raw_nodes, list):
        raise _fail(name, "nodes must be a list")

    nodes: list[dict[str, Any]] = []
    keys: list[str] = []
    for raw in raw_nodes:
        if not isinstance(raw, dict):
            raise _fail(name, "each node must be a mapping")
        key = raw.get("key")
        if not isinstance(key, str) or not KEY_RE.match(key):
            raise _fail(name, f"node key {key!r} must be lower_snake_case")
        if key in keys:
            raise _fail(name, f"duplicate node key {key!r}")
        keys.append(key)
        unknown = set(raw) - NODE_FIELDS
        if unknown:
            raise _fail(name, f"node {key!r}: unknown field(s) {', '.join(sorted(unknown))}")
        kind = raw.get("kind")
        if kind not in KINDS:
            raise _fail(name, f"node {key!r}: kind must be one of {', '.join(KINDS)}")
        if kind == "MANUAL_GATE" and not key.startswith(MANUAL_PREFIX):
            raise _fail(name, f"manual-gate node {key!r} must have a key starting with 'manual_'")
        if kind != "MANUAL_GATE" and key.startswith(MANUAL_PREFIX):
            raise _fail(name, f"node {key!r} starts with 'manual_' but is not a MANUAL_GATE")
        executor = raw.get("executor", MANUAL_GATE_EXECUTOR if kind == "MANUAL_GATE" else None)
        if not isinstance(executor, str) or not is_registered(executor):
            raise _fail(name, f"node {key!r}: unknown executor {executor!r}")
        has_side_effect = _require_bool(name, key, raw, "has_side_effect")
        signing_required = _require_bool(name, key, raw, "signing_required")
        if kind != "ACTION" and (has_side_effect or signing_required):
            raise _fail(name, f"node {key!r}: only ACTION nodes may have side effects or sign")
        config = raw.get("config") or {}
        if not isinstance(config, dict):
            raise _fail(name, f"node {key!r}: config must be a mapping")
        undeclared = _placeholders(config) - set(params) - set(BUILTIN_PARAMS)
        if undeclared:
            raise _fail(
                name,
                f"node {key!r}: config uses undeclared param(s) {', '.join(sorted(undeclared))}",
            )
        on_success = raw.get("on_success") or []
        if isinstance(on_success, str):
            on_success = [on_success]
        if not isinstance(on_success, list) or not all(isinstance(t, str) for t in on_success):
            raise _fail(name, f"node {key!r}: on_success must be a list of node keys")
        nodes.append(
            {
                "key": key,
                "kind": kind,
                "executor": executor,
                "has_side_effect": has_side_effect,
                "signing_required": signing_required,
                "config": config,
                "when": _validate_condition(name, key, raw.get("when"), params),
                "on_success": list(dict.fromkeys(on_success)),
                "description": str(raw.get("description", "")),
            }
        )

    edges = [(node["key"], target) for node in nodes for target in node["on_success"]]
    for source, target in edges:
        if target not in keys:
            raise _fail(name, f"dangling edge {source!r} -> {target!r}: no node {target!r}")
    cycle = _find_cycle(keys, edges)
    if cycle:
        raise _fail(name, f"cycle through {', '.join(cycle)}")
    return {
        "key": definition["key"],
        "version": version,
        "name": str(definition.get("name", definition["key"])),
        "description": str(definition.get("description", "")),
        "params": params,
        "assets": sorted({asset.strip().upper() for asset in assets}),
        "nodes": nodes,
    }


def _coerce_param(template: str, param: str, decl: dict, value: Any) -> Any:
    types = PARAM_TYPES[decl["type"]]
    if isinstance(value, bool) and decl["type"] in ("integer", "number"):
        raise _fail(template, f"param {param!r} must be a {decl['type']}")
    if not isinstance(value, types):
        raise _fail(template, f"param {param!r} must be a {decl['type']}")
    if decl.get("choices") and value not in decl["choices"]:
        raise _fail(template, f"param {param!r} must be one of {decl['choices']}")
    return value


def bind_params(template: dict[str, Any], params: dict[str, Any] | None) -> dict[str, Any]:
    """Check request params against the template's declarations and apply defaults."""
    name = template["key"]
    params = dict(params or {})
    declared = template["params"]
    unknown = set(params) - set(declared) - set(RESERVED_PARAMS)
    if unknown:
        raise _fail(name, f"unknown param(s) {', '.join(sorted(unknown))}")
    if "sandbox" in params and not isinstance(params["sandbox"], dict):
        raise _fail(name, "param 'sandbox' must be a mapping of node key to fault")
    bound: dict[str, Any] = {k: v for k, v in params.items() if k in RESERVED_PARAMS}
    for param, decl in declared.items():
        if param in params and params[param] is not None:
            bound[param] = _coerce_param(name, param, decl, params[param])
        elif decl["default"] is not None:
            bound[param] = decl["default"]
        elif decl["required"]:
            raise _fail(name, f"missing required param {param!r}")
    return bound


def _substitute(value: Any, context: dict[str, Any]) -> Any:
    if isinstance(value, str):
        whole = PLACEHOLDER_RE.fullmatch(value)
        if whole:
            return context.get(whole.group(1))
        return PLACEHOLDER_RE.sub(lambda m: str(context.get(m.group(1), "")), value)
    if isinstance(value, dict):
        return {k: _substitute(v, context) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, context) for v in value]
    return value


def condition_holds(condition: dict[str, Any] | None, context: dict[str, Any]) -> bool:
    """Evaluate a node's ``when`` against the request's bound params and fields."""
    if not condition:
        return True
    value = context.get(condition["param"])
    if "equals" in condition:
        return value == condition["equals"]
    if "not_equals" in condition:
        return value != condition["not_equals"]
    return value in condition["in"]


def request_context(*, asset: str, amount: Decimal, source: str, destination: str, params: dict):
    return {
        "asset": asset,
        "amount": str(amount),
        "source": source,
        "destination": destination,
        **params,
    }


def compile_plan(
    template: dict[str, Any],
    *,
    asset: str,
    amount: Decimal,
    source: str,
    destination: str,
    params: dict[str, Any] | None,
) -> CompiledPlan:
    """Bind a validated template to one request: the plan snapshot the request will run.
    Whatever the template itself rules out (an asset it cannot move, a param it refuses) is
    refused here, when the movement is created, not found later by a venue."""
    assets = template.get("assets") or []
    if assets and asset not in assets:
        raise _fail(template["key"], f"this route moves {', '.join(assets)} only, not {asset}")
    bound = bind_params(template, params)
    context = request_context(
        asset=asset, amount=amount, source=source, destination=destination, params=bound
    )
    nodes = [
        PlanNode(
            key=node["key"],
            kind=node["kind"],
            executor=node["executor"],
            has_side_effect=node["has_side_effect"],
            signing_required=node["signing_required"],
            config=_substitute(node["config"], context),
            condition=node["when"],
            position=position,
        )
        for position, node in enumerate(template["nodes"])
    ]
    edges = [(node["key"], target) for node in template["nodes"] for target in node["on_success"]]
    return CompiledPlan(
        template_key=template["key"],
        template_version=template["version"],
        nodes=nodes,
        edges=edges,
        params=bound,
    )


def load_template_file(path: Path) -> tuple[dict[str, Any], str]:
    """Read, parse and validate one YAML file; return (normalised template, sha256). The file
    is read every time; the same bytes are parsed once per process (``_parse``), and validated
    every time (the executors it names may be registered or not since)."""
    raw = Path(path).read_bytes()
    try:
        parsed = copy.deepcopy(_parse(raw))
    except yaml.YAMLError as exc:
        raise TemplateInvalid(f"route template {Path(path).name}: not valid YAML ({exc})") from exc
    return validate_template(parsed), hashlib.sha256(raw).hexdigest()


# libyaml's parser where PyYAML was built with it (several times faster), else PyYAML's own.
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.lru_cache(maxsize=64)
def _parse(raw: bytes) -> Any:
    """The YAML of a template file, parsed once per content: every movement created on a
    fresh table (each test, a new deployment) loads every file again. Callers get a copy."""
    return yaml.load(raw, Loader=_SafeLoader)
