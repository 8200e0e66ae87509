"""Forgetting: remove a fact or a text from every copy ctxgraph keeps of a user's data.

``forget``/``aforget`` find each occurrence (memory facts and their history, the profile,
every thread the user owns: its checkpoints, archive, artifacts, background job results
and queued extractions), replace it with ``REDACTION_MARKER`` or delete the item, keep
the archive verifiable, and leave a receipt (``ctxgraph.store.receipts``).
"""

from ctxgraph.store.forget.run import ForgetError, aforget, forget

__all__ = ["ForgetError", "aforget", "forget"]
