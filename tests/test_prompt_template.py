import pytest

from ctxgraph.state.prompt_template import PromptTemplateError, check_template, placeholders


def test_placeholders_are_the_named_fields():
    assert placeholders("a {x} b {y} {{literal}} {x}") == {"x", "y"}


@pytest.mark.parametrize(
    ("template", "fragment"),
    [
        ("{x", "literal braces"),
        ("{} and {x}", "plain names"),
        ("{x.attr}", "plain names"),
        ("{x[0]}", "plain names"),
    ],
)
def test_unparseable_templates_are_refused_with_the_fix(template, fragment):
    with pytest.raises(PromptTemplateError, match="my_prompt") as caught:
        check_template(template, parameter="my_prompt", allowed={"x"})
    assert fragment in str(caught.value)


def test_unknown_and_missing_placeholders_are_named():
    with pytest.raises(PromptTemplateError, match=r"unknown placeholder\(s\) \['z'\]"):
        check_template("{x} {z}", parameter="p", allowed={"x", "y"})
    with pytest.raises(PromptTemplateError, match=r"lacks the placeholder\(s\) \['y'\]"):
        check_template("{x}", parameter="p", allowed={"x", "y"}, required={"x", "y"})


def test_a_non_string_is_refused():
    with pytest.raises(PromptTemplateError, match="must be a str template, not int"):
        check_template(3, parameter="p", allowed=())


def test_a_good_template_comes_back_unchanged():
    template = "{x} then {y} {{not a field}}"
    assert check_template(template, parameter="p", allowed={"x", "y"}, required={"x"}) == template
    assert template.format(x=1, y=2) == "1 then 2 {not a field}"
