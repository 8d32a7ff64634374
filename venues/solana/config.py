"""The reviewed ``kind: solana`` entries of ``venues/chains.yaml``.

```yaml
chains:
  solana:
    kind: solana
    rpc_url_env: QTG_SOLANA_RPC_URL         # the URL is in this env variable (as for EVM)
    rpc_endpoints: [QTG_SOLANA_RPC_URL_B]   # optional: more endpoints (their env variables),
                                            # asked before a transaction is concluded EXPIRED
    max_head_lag_slots: 150                 # optional (150): an endpoint whose slot is more
                                            # than this behind the highest is lagging
    commitment:
      blockhash: confirmed    # getLatestBlockhash and preflight
      landed: confirmed       # the transfer node completes once its transaction is this deep
      final: finalized        # the observe node completes here (the finality policy)
    rpc_timeout_seconds: 10
    tokens:
      SOL: {decimals: 9}                           # native: no mint
      USDC: {mint: <base58 mint>, decimals: 6}
    accounts:
      solana-treasury: {address: <base58>, key: {env: QTG_SOLANA_TREASURY_KEY}}
```

A malformed entry is a configuration error at first use, naming the entry; nothing runs on a
half-understood policy.
"""

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from solders.pubkey import Pubkey

from venues import conf
from venues.signing import Signer

from .signing import solana_signer

COMMITMENTS = ("processed", "confirmed", "finalized")
NATIVE = "SOL"


@dataclass(frozen=True)
class Token:
    asset: str
    decimals: int
    mint: Pubkey | None  # None: native SOL

    @property
    def native(self) -> bool:
        return self.mint is None


@dataclass(frozen=True)
class Account:
    name: str
    address: Pubkey
    key: dict[str, Any]  # where the secret is; read only when signing


@dataclass(frozen=True)
class SolanaChain:
    name: str
    rpc_url_env: str
    blockhash_commitment: str
    landed_commitment: str
    final_commitment: str
    rpc_timeout_seconds: float
    tokens: dict[str, Token]
    accounts: dict[str, Account]
    # Seconds a FINALIZED transaction is still looked at by the observe node before it
    # completes (a finalized signature that vanishes meanwhile: ``final_reorg``).
    post_final_watch: float = 0.0
    # More endpoints of the chain (env variable names), asked before a conclusion of absence
    # (EXPIRED): every one not lagging must agree, one that sees the landing means landed.
    rpc_endpoints: tuple[str, ...] = ()
    # An endpoint whose processed slot is more than this behind the highest is lagging: its
    # "no landing" does not count (a landing it does show still does).
    max_head_lag_slots: int = 150

    @property
    def rpc_url(self) -> str:
        return conf.rpc_url(self.name, self.rpc_url_env)

    @property
    def endpoint_envs(self) -> tuple[str, ...]:
        """Every endpoint's env variable, the primary (sends, everyday reads) first."""
        return (self.rpc_url_env, *self.rpc_endpoints)

    def endpoint_urls(self) -> list[tuple[str, str]]:
        """(env variable, URL) of every endpoint, the primary first."""
        return [(env, conf.rpc_url(self.name, env)) for env in self.endpoint_envs]

    def token(self, asset: str) -> Token:
        try:
            return self.tokens[asset.upper()]
        except KeyError:
            raise ImproperlyConfigured(f"chain {self.name} moves no {asset}") from None

    def account(self, name: str) -> Account:
        try:
            return self.accounts[name]
        except KeyError:
            raise ImproperlyConfigured(f"chain {self.name} has no account {name!r}") from None

    def signer(self, account: Account) -> Signer:
        """The account's signer (the key is read where the config says, never stored)."""
        what = f"chains.{self.name}.accounts.{account.name}.key"
        signer = solana_signer(account.key, what=what)
        if signer.address() != str(account.address):
            raise ImproperlyConfigured(f"{what} does not belong to {account.address}")
        return signer


def _fail(name: str, problem: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"{conf.config_path('chains')}: chains.{name}: {problem}")


def _pubkey(name: str, value: Any, what: str) -> Pubkey:
    try:
        return Pubkey.from_string(str(value))
    except ValueError:
        raise _fail(name, f"{what} is not a base58 public key") from None


def _commitment(name: str, raw: dict, key: str, default: str) -> str:
    value = raw.get(key, default)
    if value not in COMMITMENTS:
        raise _fail(name, f"commitment.{key} must be one of {', '.join(COMMITMENTS)}")
    return value


def parse_chain(name: str, entry: dict[str, Any]) -> SolanaChain:
    commitment = entry.get("commitment") or {}
    if not isinstance(commitment, dict):
        raise _fail(name, "commitment must be a mapping")
    final = _commitment(name, commitment, "final", "finalized")
    landed = _commitment(name, commitment, "landed", "confirmed")
    if COMMITMENTS.index(landed) > COMMITMENTS.index(final):
        raise _fail(name, "commitment.landed cannot be deeper than commitment.final")
    rpc_url_env = entry.get("rpc_url_env")
    if not isinstance(rpc_url_env, str) or not rpc_url_env:
        raise _fail(name, "rpc_url_env must name the env variable that holds the RPC URL")
    tokens: dict[str, Token] = {}
    for asset, spec in (entry.get("tokens") or {}).items():
        asset = str(asset).upper()
        if not isinstance(spec, dict) or not isinstance(spec.get("decimals"), int):
            raise _fail(name, f"tokens.{asset} needs integer decimals")
        mint = spec.get("mint")
        if asset == NATIVE:
            if mint is not None or spec["decimals"] != 9:
                raise _fail(name, "tokens.SOL is native: 9 decimals and no mint")
        elif mint is None:
            raise _fail(name, f"tokens.{asset} needs its mint")
        tokens[asset] = Token(
            asset, spec["decimals"], None if mint is None else _pubkey(name, mint, "mint")
        )
    accounts: dict[str, Account] = {}
    for account, spec in (entry.get("accounts") or {}).items():
        if not isinstance(spec, dict) or not isinstance(spec.get("key"), dict):
            raise _fail(name, f"accounts.{account} needs an address and a key reference")
        address = _pubkey(name, spec.get("address"), f"accounts.{account}.address")
        accounts[str(account)] = Account(str(account), address, spec["key"])
    return SolanaChain(
        name=name,
        rpc_url_env=rpc_url_env,
        blockhash_commitment=_commitment(name, commitment, "blockhash", "confirmed"),
        landed_commitment=landed,
        final_commitment=final,
        rpc_timeout_seconds=float(entry.get("rpc_timeout_seconds", 10)),
        tokens=tokens,
        accounts=accounts,
        post_final_watch=_watch(name, entry),
        rpc_endpoints=_endpoints(name, entry, rpc_url_env),
        max_head_lag_slots=_lag(name, entry),
    )


def _endpoints(name: str, entry: dict[str, Any], primary: str) -> tuple[str, ...]:
    more = entry.get("rpc_endpoints") or []
    if not isinstance(more, list) or not all(isinstance(v, str) and v for v in more):
        raise _fail(name, "rpc_endpoints must be a list of environment variable names")
    if len(set(more) | {primary}) != len(more) + 1:
        raise _fail(name, "an RPC endpoint is listed twice")
    return tuple(more)


def _lag(name: str, entry: dict[str, Any]) -> int:
    value = entry.get("max_head_lag_slots", 150)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _fail(name, "max_head_lag_slots must be a whole number of slots >= 0")
    return value


def _watch(name: str, entry: dict[str, Any]) -> float:
    value = entry.get("post_final_watch", 0)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise _fail(name, "post_final_watch must be a number of seconds >= 0")
    return float(value)


def solana_chains() -> dict[str, SolanaChain]:
    """Every ``kind: solana`` chain of the reviewed configuration (parsed once per version of
    the file)."""
    return conf.chains("solana")


def solana_chain(name: str) -> SolanaChain:
    if conf.chain_kind(name) != "solana":
        raise ImproperlyConfigured(f"no solana chain {name!r} in the chains configuration")
    return conf.chain(name)
