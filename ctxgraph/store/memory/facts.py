"""The fact records and the parser of stored values, kept importable from ``store.memory``.

They live in ``ctxgraph.store.facts``, below both ``store.memory`` and ``store.search`` (whose
fact index checks every value it takes in), so neither package imports the other for them.
Each name is re-exported as itself (``X as X``).
"""

from __future__ import annotations

from ctxgraph.store.facts import (
    PROVENANCES as PROVENANCES,
)
from ctxgraph.store.facts import (
    Fact as Fact,
)
from ctxgraph.store.facts import (
    FactScope as FactScope,
)
from ctxgraph.store.facts import (
    Problem as Problem,
)
from ctxgraph.store.facts import (
    Provenance as Provenance,
)
from ctxgraph.store.facts import (
    fact_from_value as fact_from_value,
)
from ctxgraph.store.facts import (
    parse_fact as parse_fact,
)
from ctxgraph.store.facts import (
    parse_profile as parse_profile,
)
from ctxgraph.store.facts import (
    report_problem as report_problem,
)
