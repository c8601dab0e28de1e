"""The default policy registry: a value built on demand, keyed by ``PolicyKind`` (STYLE G7)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from elastico_core.sim.policies.elastico import ElasticoPolicy
from elastico_core.sim.policies.greedy import GreedyPolicy
from elastico_core.sim.policies.lucid import LucidPolicy
from elastico_core.sim.policies.volcano import VolcanoPolicy
from elastico_core.sim.policy import Policy, PolicyContext, PolicyFactory, PolicyKind, Registry


def _elastico(kind: PolicyKind) -> PolicyFactory:
    def make(ctx: PolicyContext) -> Policy:
        return ElasticoPolicy.preset(kind, ctx)

    return make


def default_registry() -> Registry[PolicyKind, PolicyFactory]:
    reg: Registry[PolicyKind, PolicyFactory] = Registry()
    reg.register(PolicyKind.VOLCANO, VolcanoPolicy.from_context)
    reg.register(PolicyKind.LUCID, LucidPolicy.from_context)
    reg.register(PolicyKind.GREEDY, GreedyPolicy.from_context)
    for kind in (PolicyKind.ELASTICO, PolicyKind.ELASTICO_BOUNDED, PolicyKind.ELASTICO_NO_RST, PolicyKind.ELASTICO_NO_IAC, PolicyKind.ELASTICO_NO_PDS):
        reg.register(kind, _elastico(kind))
    return reg


# Labels used in reports (Tables 4 and 5).
LABELS: Mapping[PolicyKind, str] = MappingProxyType({
    PolicyKind.VOLCANO: "Volcano-like",
    PolicyKind.LUCID: "Lucid-like",
    PolicyKind.GREEDY: "w/o ESP (greedy first-fit)",
    PolicyKind.ELASTICO: "ElastiCo",
    PolicyKind.ELASTICO_BOUNDED: "ElastiCo (IAC upper bound)",
    PolicyKind.ELASTICO_NO_RST: "w/o RST",
    PolicyKind.ELASTICO_NO_IAC: "w/o IAC",
    PolicyKind.ELASTICO_NO_PDS: "w/o PDS",
})
