"""``CompactionPart(summary_prompt=)``, ``MemoryPart(extraction_prompt=)``: the caller's prompts.

Both are checked when the graph is built (a bad placeholder is a ``PromptTemplateError``
naming the argument), and the model of each role receives the caller's text.
"""

from __future__ import annotations

import pytest
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph import CompactionPart, Context, MemoryPart, Settings, build_graph
from ctxgraph.graph import as_subgraph, wait_for_memory
from ctxgraph.nodes.memory.extract import (
    EXTRACTION_PROMPT,
    EXTRACTION_SYSTEM,
    ExtractionPrompt,
    MemoryExtractor,
    extraction_prompt,
)
from ctxgraph.nodes.memory.worker import worker_from_env
from ctxgraph.state.demo_model import demo_models
from ctxgraph.state.messages import content_text
from ctxgraph.state.prompt_template import PromptTemplateError
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.memory.repository import MemoryRepository

CONTEXT = Context(user_id="prompt-user")

EXTRACTION = """House rules: remember only what the user says about their own work.

Known: {profile} / {facts}

<new_conversation>
{conversation}
</new_conversation>"""

SUMMARY = """House summary rules: keep every order number.

<previous_summary>
{previous_summary}
</previous_summary>

<folded_messages>
{folded}
</folded_messages>

Stay under {max_tokens} tokens."""

ROWS = [{"id": "m1", "role": "user", "content": "I prefer Python for backend work."}]


def memory_requests(model: ScriptedChatModel) -> list[list[BaseMessage]]:
    return [r for r in model.requests if r and content_text(r[0]) == EXTRACTION_SYSTEM]


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("Remember {conversation} for {user}", r"unknown placeholder\(s\) \['user'\]"),
        ("Remember what matters in {facts}", r"lacks the placeholder\(s\) \['conversation'\]"),
        ("Remember {conversation} {", "literal braces"),
        (b"{conversation}", "must be a str template, not bytes"),
    ],
)
def test_a_bad_extraction_prompt_is_refused_when_the_graph_is_built(
    template: object, message: str
) -> None:
    with pytest.raises(PromptTemplateError, match=f"extraction_prompt.*{message}|{message}"):
        build_graph(models=demo_models(), parts=[MemoryPart(template)])  # type: ignore[arg-type]
    with pytest.raises(PromptTemplateError):
        as_subgraph(models=demo_models(), parts=[MemoryPart(template)])  # type: ignore[arg-type]
    with pytest.raises(PromptTemplateError):
        ExtractionPrompt(template)  # type: ignore[arg-type]


def test_a_bad_summary_prompt_is_refused_when_the_graph_is_built() -> None:
    with pytest.raises(PromptTemplateError, match="summary_prompt"):
        build_graph(models=demo_models(), parts=[CompactionPart("Summarize {everything}")])


def test_the_extractor_sends_the_callers_template_with_the_fixed_system_rules() -> None:
    models = demo_models()
    model = models.memory
    assert isinstance(model, ScriptedChatModel)
    extractor = MemoryExtractor(model, EXTRACTION)
    result = extractor.extract(
        ROWS, CONTEXT, MemoryRepository(InMemoryStore()), thread_id="t", threshold=0.7
    )
    assert [fact.content for fact in result.stored] == ["I prefer Python for backend work."]
    (request,) = memory_requests(model)
    assert content_text(request[0]) == EXTRACTION_SYSTEM
    prompt = content_text(request[-1])
    assert prompt.startswith("House rules: remember only")
    assert prompt.endswith(
        " / (none)\n\n<new_conversation>\n[m1] user: "
        + ROWS[0]["content"]
        + "\n</new_conversation>"
    )
    profile = MemoryRepository(InMemoryStore()).get_profile(CONTEXT)
    assert prompt == extraction_prompt(ROWS, profile, [], EXTRACTION)[-1].content
    # Without a template the built-in prompt is sent, as before.
    default = extraction_prompt(ROWS, {}, [])[-1].content
    assert isinstance(default, str) and default.startswith(EXTRACTION_PROMPT.split("\n", 1)[0])


def test_the_worker_takes_the_same_template() -> None:
    extractor, _ = worker_from_env({"CTXGRAPH_MODEL": "scripted"}, extraction_prompt=EXTRACTION)
    assert extractor.prompt == ExtractionPrompt(EXTRACTION)
    with pytest.raises(PromptTemplateError):
        worker_from_env({"CTXGRAPH_MODEL": "scripted"}, extraction_prompt="{nothing}")


def test_the_summary_model_receives_the_callers_summary_prompt() -> None:
    models = demo_models()
    graph = build_graph(
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
        models=models,
        settings=Settings(trigger_messages=6, keep_messages=2, memory_extraction="off"),
        parts=[CompactionPart(summary_prompt=SUMMARY)],
    )
    config = {"configurable": {"thread_id": "s"}}
    notes = " ".join(f"Stop {n} of the tour is pier {n}, open from 9:00." for n in range(1, 30))
    for text in [f"Order E-5005 is late. Notes: {notes}", "What is 2 + 2?", "What is 3 + 3?"]:
        graph.invoke({"messages": [("user", text)]}, config, context=CONTEXT)
    assert graph.get_state(config).values["compaction"]["version"] >= 1
    summary = models.summary
    assert isinstance(summary, ScriptedChatModel) and summary.requests
    prompt = content_text(summary.requests[0][-1])
    assert prompt.startswith("House summary rules: keep every order number.")
    assert "Order E-5005 is late." in prompt


def test_the_graphs_memory_model_receives_the_callers_extraction_prompt() -> None:
    models = demo_models()
    store = InMemoryStore()
    graph = build_graph(
        checkpointer=InMemorySaver(),
        store=store,
        models=models,
        parts=[MemoryPart(extraction_prompt=EXTRACTION)],
    )
    graph.invoke(
        {"messages": [("user", "I prefer Python for backend work.")]},
        {"configurable": {"thread_id": "x"}},
        context=CONTEXT,
    )
    assert wait_for_memory(30) == 0  # the extraction runs after the turn (background)
    memory = models.memory
    assert isinstance(memory, ScriptedChatModel)
    (request,) = memory_requests(memory)
    assert content_text(request[-1]).startswith("House rules: remember only")
    facts = MemoryRepository(store).list_facts(CONTEXT)
    assert [fact.content for fact in facts] == ["I prefer Python for backend work."]
