"""Filtering a turn down to what the memory model should see."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from ctxgraph.nodes.memory.filter import (
    filter_for_memory,
    has_user_rows,
    is_ack_only,
    render_rows,
    strip_uploads,
)

UPLOAD = "<current_uploads>\n<file name='report.csv'>\na,b,c\n1,2,3\n</file>\n</current_uploads>"


def user(text, id_, **kwargs):
    return HumanMessage(content=text, id=id_, **kwargs)


def ai(text, id_, **kwargs):
    return AIMessage(content=text, id=id_, **kwargs)


def tool_call_turn(prefix="t"):
    call = {"id": f"{prefix}-call", "name": "search_docs", "args": {"q": "x"}}
    return [
        AIMessage(content="Let me look that up.", id=f"{prefix}-ai", tool_calls=[call]),
        ToolMessage(content="RESULT " * 50, tool_call_id=f"{prefix}-call", id=f"{prefix}-tool"),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "你好",
        "您好",
        "好的",
        "好",
        "嗯",
        "嗯嗯",
        "谢谢",
        "多谢",
        "收到",
        "明白",
        "行",
        "可以",
        "好的，谢谢！",
        "好的好的~",
        "你好呀",
        "ok",
        "OK",
        "okay.",
        "thanks",
        "Thank you!",
        "thx",
        "hi",
        "Hello!!",
        "hey",
        "got it",
        "Sure.",
        "cool",
        "great!",
        "ok thanks",
        "  Got it, thanks!  ",
        "ok，好的",
    ],
)
def test_greetings_and_acks_are_ack_only(text):
    assert is_ack_only(text)


@pytest.mark.parametrize(
    "text",
    [
        "好的，不过以后先给最小示例",
        "你好，我叫王伟，在上海做后端开发",
        "谢谢，另外我更喜欢用 TypeScript",
        "ok thanks, and please always answer in English",
        "Hello! I work at Acme on the billing team.",
        "hi Claude",
        "thanks 👍 also call me Sam",
        "okayish",
        "great work on the Postgres migration",
        "sure, but use tabs not spaces",
        "",
    ],
)
def test_substantive_messages_are_not_ack_only(text):
    assert not is_ack_only(text)


def test_keeps_user_and_final_answer_and_preserves_ids():
    rows = filter_for_memory(
        [user("I prefer short answers with code first.", "u1"), ai("Noted, will do.", "a1")]
    )
    assert rows == [
        {"id": "u1", "role": "user", "content": "I prefer short answers with code first."},
        {"id": "a1", "role": "assistant", "content": "Noted, will do."},
    ]
    assert has_user_rows(rows)


def test_greeting_and_its_reply_are_dropped_but_next_exchange_kept():
    rows = filter_for_memory(
        [
            user("好的，谢谢！", "u1"),
            ai("不客气！还有什么可以帮你？", "a1"),
            user("好的，不过以后先给最小示例", "u2"),
            ai("明白，以后先给最小示例。", "a2"),
        ]
    )
    assert [row["id"] for row in rows] == ["u2", "a2"]
    assert rows[0]["content"] == "好的，不过以后先给最小示例"


def test_english_greeting_then_substantive_message():
    rows = filter_for_memory(
        [
            user("Hello!!", "u1"),
            ai("Hi! How can I help?", "a1"),
            user("Hello! I work at Acme on the billing team.", "u2"),
            ai("Nice to meet you.", "a2"),
        ]
    )
    assert [row["id"] for row in rows] == ["u2", "a2"]


def test_reply_after_dropped_greeting_is_dropped_even_after_tool_calls():
    rows = filter_for_memory(
        [user("ok thanks", "u1"), *tool_call_turn(), ai("You're welcome.", "a1")]
    )
    assert rows == []
    assert not has_user_rows(rows)


def test_uploads_are_stripped_and_surrounding_words_kept():
    text = f"Please check this file.\n{UPLOAD}\nI always want totals in EUR."
    rows = filter_for_memory([user(text, "u1")])
    assert rows == [
        {
            "id": "u1",
            "role": "user",
            "content": "Please check this file.\n\nI always want totals in EUR.",
        }
    ]
    assert "a,b,c" not in render_rows(rows)


def test_uploads_stripping_is_case_insensitive_and_multiline():
    text = "Before <CURRENT_UPLOADS kind='x'>\nline 1\nline 2\n</Current_Uploads> after"
    assert strip_uploads(text) == "Before  after"
    assert strip_uploads("Keep me <current_uploads>\nnever closed") == "Keep me"


def test_upload_only_message_and_its_reply_are_dropped():
    rows = filter_for_memory([user(f"  {UPLOAD}  ", "u1"), ai("The file has two rows.", "a1")])
    assert rows == []


def test_upload_plus_greeting_is_dropped():
    rows = filter_for_memory([user(f"{UPLOAD}\nthanks!", "u1")])
    assert rows == []


def test_injected_messages_are_ignored():
    memory = user("User prefers Rust. User lives in Berlin.", "m1")
    memory.additional_kwargs["origin"] = "memory"
    summary = SystemMessage(content="Summary of earlier turns", id="s1")
    summary.additional_kwargs["origin"] = "summary"
    runtime = user("Current time: 2025-01-01", "r1")
    runtime.additional_kwargs["origin"] = "runtime"
    upload = user("File contents ...", "f1")
    upload.additional_kwargs["origin"] = "upload"
    injected_ai = ai("Earlier summary", "x1")
    injected_ai.additional_kwargs["origin"] = "summary"
    rows = filter_for_memory(
        [
            SystemMessage(content="You are helpful.", id="sys"),
            summary,
            memory,
            runtime,
            upload,
            injected_ai,
            user("What's a good crate for CLI parsing?", "u1"),
            ai("clap is the usual choice.", "a1"),
        ]
    )
    assert [row["id"] for row in rows] == ["u1", "a1"]


def test_injected_message_does_not_reset_greeting_follow_up():
    memory = user("User prefers Rust.", "m1", additional_kwargs={"origin": "memory"})
    rows = filter_for_memory([user("hi", "u1"), memory, ai("Hello!", "a1")])
    assert rows == []


def test_tool_call_messages_and_tool_results_are_dropped():
    rows = filter_for_memory(
        [
            user("Find the refund policy; I manage the EMEA team.", "u1"),
            *tool_call_turn("a"),
            *tool_call_turn("b"),
            ai("Refunds above 500 EUR need approval.", "a1"),
        ]
    )
    assert [(row["id"], row["role"]) for row in rows] == [("u1", "user"), ("a1", "assistant")]
    assert "RESULT" not in render_rows(rows)


def test_invalid_tool_call_and_empty_assistant_text_are_dropped():
    broken = AIMessage(
        content="calling",
        id="a0",
        invalid_tool_calls=[{"type": "invalid_tool_call", "id": "c", "name": "x", "args": "{"}],
    )
    rows = filter_for_memory([user("Remember I use vim.", "u1"), broken, ai("   ", "a1")])
    assert [row["id"] for row in rows] == ["u1"]


def test_list_content_blocks_keep_text_and_ignore_others():
    human = HumanMessage(
        content=[
            {"type": "text", "text": "This is my cat, her name is Mochi."},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            "I adopted her in 2021.",
            {"type": "text", "text": 42},
        ],
        id="u1",
    )
    reply = AIMessage(
        content=[{"type": "reasoning", "reasoning": "hidden"}, {"type": "text", "text": "Cute!"}],
        id="a1",
    )
    image_only = HumanMessage(
        content=[{"type": "image_url", "image_url": {"url": "http://x/y.png"}}], id="u2"
    )
    rows = filter_for_memory([human, reply, image_only, ai("Nice picture.", "a2")])
    assert rows == [
        {
            "id": "u1",
            "role": "user",
            "content": "This is my cat, her name is Mochi.\nI adopted her in 2021.",
        },
        {"id": "a1", "role": "assistant", "content": "Cute!"},
    ]


def test_missing_ids_fall_back_to_position():
    rows = filter_for_memory(
        [SystemMessage(content="sys"), HumanMessage(content="I live in Oslo.")]
    )
    assert rows == [{"id": "#1", "role": "user", "content": "I live in Oslo."}]


def test_has_user_rows_false_for_assistant_only_turn():
    rows = filter_for_memory([*tool_call_turn(), ai("Here is the summary you asked for.", "a1")])
    assert rows == [
        {"id": "a1", "role": "assistant", "content": "Here is the summary you asked for."}
    ]
    assert not has_user_rows(rows)
    assert not has_user_rows([])


def test_render_rows_is_compact_transcript():
    rows = [
        {"id": "u1", "role": "user", "content": "Line one\n\n  line   two"},
        {"id": "a1", "role": "assistant", "content": "OK."},
    ]
    assert render_rows(rows) == "[u1] user: Line one line two\n[a1] assistant: OK."
    assert render_rows([]) == ""
