"""The per-thread correction from local (cl100k) token counts to the tokens a provider bills."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from typing_extensions import TypedDict

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import BaseMessage

MIN_FACTOR = 0.5
"""The smallest correction factor kept: no provider bills half of cl100k's count."""

MAX_FACTOR = 3.0
"""The largest correction factor kept: a larger ratio is a bad report, not a tokenizer."""

SMOOTHING = 0.3
"""Weight of a new sample in the factor's exponential moving average."""

MIN_SAMPLE_TOKENS = 256
"""Requests counted locally below this many tokens are too small to calibrate with."""


class TokenCalibration(TypedDict):
    """Reported input tokens per locally counted token of the main model's requests."""

    model: str
    """The main model the factor was measured on; another model starts afresh."""
    factor: float
    """The smoothed ratio of reported to local tokens, within ``MIN_FACTOR..MAX_FACTOR``."""
    samples: int
    """How many answers the factor was measured from."""


def model_name(model: BaseChatModel) -> str:
    """The name a calibration is kept under: the model's name, else its class name."""
    for attribute in ("model_name", "model", "model_id"):
        value = getattr(model, attribute, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__


def factor_of(calibration: TokenCalibration | None, model: str) -> float:
    """The factor to multiply local counts by for ``model`` (1.0 when not calibrated)."""
    if not calibration or calibration.get("model") != model:
        return 1.0
    return _bounded(float(calibration.get("factor", 1.0)))


def reported_input_tokens(reply: BaseMessage) -> int | None:
    """The input tokens the provider reported for ``reply`` (None when it reported none)."""
    usage: Any = getattr(reply, "usage_metadata", None)
    if not usage:
        return None
    tokens = usage.get("input_tokens")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens <= 0:
        return None
    return tokens


def calibrated(
    current: TokenCalibration | None, model: str, local: int, reported: int
) -> TokenCalibration | None:
    """``current`` updated with one answer; None when the sample is too small to use.

    The first sample of a model sets its factor; each later one moves it by
    ``SMOOTHING`` of the way. Samples and the factor are clamped to
    ``MIN_FACTOR..MAX_FACTOR``.
    """
    if local < MIN_SAMPLE_TOKENS:
        return None
    ratio = _bounded(reported / local)
    if not current or current.get("model") != model:
        return {"model": model, "factor": ratio, "samples": 1}
    previous = _bounded(float(current.get("factor", 1.0)))
    factor = _bounded(previous + SMOOTHING * (ratio - previous))
    return {"model": model, "factor": factor, "samples": int(current.get("samples", 0)) + 1}


def scaled(tokens: int, factor: float) -> int:
    """``tokens`` counted locally, as the provider would bill them under ``factor``."""
    return tokens if factor == 1.0 else round(tokens * factor)


def _bounded(factor: float) -> float:
    return min(MAX_FACTOR, max(MIN_FACTOR, factor))
