#!/usr/bin/env python3
"""Oracle for furlong's chat-template interpreter (src/tokenizer/jinja).

Two modes, each writing a JSON list that tests/tokenizer/chat_template_test.cpp compares
byte-for-byte with the C++ renderer:

  golden --tokenizers DIR --out FILE
      Conversations rendered by transformers' tokenizer.apply_chat_template(tokenize=False)
      for the real tokenizers DIR/qwen3 and DIR/llama3.
      Entries: {tokenizer, name, messages, add_generation_prompt, extra, expected}.

  jinja --out FILE
      Small templates rendered by jinja2 in the exact environment transformers builds for chat
      templates (trim_blocks, lstrip_blocks, loopcontrols, its tojson/raise_exception/...).
      Entries: {name, template, context, expected} or {..., error: "<exception type>"}.
"""

import argparse
import json
import sys


def conversations():
    """(name, messages, extra kwargs) triples covering what chat templates branch on."""
    weather_tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city — °C or °F.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. \"Zürich\""},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "days": {"type": "integer", "minimum": 1, "maximum": 7.5},
                },
                "required": ["city"],
            },
        },
    }
    search_tool = {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web.\nReturns JSON.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
    call_dict = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "arguments": {"city": "Zürich", "unit": "celsius", "days": 3, "ratio": 0.5,
                          "flags": [True, False, None], "nested": {"b": 1, "a": [1.0, "x"]}},
        },
    }
    call_str = {
        "type": "function",
        "function": {"name": "search", "arguments": "{\"q\": \"best pizza\"}"},
    }
    bare_call = {"name": "search", "arguments": {"q": "日本語"}}

    sys_msg = {"role": "system", "content": "You are a helpful assistant."}
    user = {"role": "user", "content": "What is 2 + 2?"}
    asst = {"role": "assistant", "content": "2 + 2 = 4."}
    user2 = {"role": "user", "content": "And 3 + 3?"}
    cases = [
        ("single_user", [user], {}),
        ("system_user", [sys_msg, user], {}),
        ("multi_turn", [sys_msg, user, asst, user2], {}),
        ("ends_with_assistant", [user, asst], {}),
        ("whitespace_edges", [
            {"role": "system", "content": "  padded system \n"},
            {"role": "user", "content": "\n\n  hello  \t\n"},
            {"role": "assistant", "content": "\n answer \n"},
        ], {}),
        ("think_in_content", [
            user,
            {"role": "assistant", "content": "<think>\nLet me add.\n2+2=4\n</think>\n\nIt is 4."},
            user2,
        ], {}),
        ("think_last_assistant", [
            user,
            {"role": "assistant", "content": "<think>\nreasoning here\n</think>\n\nFour."},
        ], {}),
        ("reasoning_content_field", [
            user,
            {"role": "assistant", "content": "Four.", "reasoning_content": "2 plus 2 is 4."},
            user2,
            {"role": "assistant", "content": "Six.", "reasoning_content": "\n3+3=6\n"},
        ], {}),
        ("thinking_field_alias", [
            user,
            {"role": "assistant", "content": "Four.", "thinking": "aliased reasoning"},
        ], {}),
        ("none_values_dropped", [
            {"role": "user", "content": "hi", "name": None},
            {"role": "assistant", "content": "hello", "tool_calls": None},
        ], {}),
        ("enable_thinking_false", [sys_msg, user], {"enable_thinking": False}),
        ("enable_thinking_true", [user], {"enable_thinking": True}),
        ("tools_no_system", [user], {"tools": [weather_tool, search_tool]}),
        ("tools_with_system", [sys_msg, user], {"tools": [weather_tool]}),
        ("tool_call_roundtrip", [
            sys_msg,
            {"role": "user", "content": "Weather in Zürich and pizza?"},
            {"role": "assistant", "content": "", "tool_calls": [call_dict, call_str]},
            {"role": "tool", "content": "{\"temp\": 21}"},
            {"role": "tool", "content": "Luigi's"},
            {"role": "assistant", "content": "It is 21 °C; try Luigi's."},
        ], {"tools": [weather_tool, search_tool]}),
        ("tool_call_with_text_and_reasoning", [
            user,
            {"role": "assistant", "content": "Let me check.", "reasoning_content": "need tool",
             "tool_calls": [bare_call]},
            {"role": "tool", "content": "result A"},
        ], {"tools": [search_tool]}),
        ("tool_call_none_content", [
            user,
            {"role": "assistant", "content": "", "tool_calls": [call_str]},
            {"role": "tool", "content": "r1"},
            {"role": "user", "content": "<tool_response>\nextra\n</tool_response>"},
        ], {}),
        ("unicode", [
            {"role": "system", "content": "Réponds en français. 你好！ مرحبا"},
            {"role": "user", "content": "Emoji 🤖🚀 quotes \"x\" 'y' backslash \\ tab\t nbsp\u00a0 ls\u2028"},
            {"role": "assistant", "content": "Ça va 👍 — ok"},
            {"role": "user", "content": "Ελληνικά и русский"},
        ], {}),
        ("second_system_message", [sys_msg, user, {"role": "system", "content": "Be brief."}, user2], {}),
        ("empty_content", [{"role": "user", "content": ""}], {}),
    ]
    return cases


def golden(tokenizer_root, out_path):
    from transformers import AutoTokenizer

    entries = []
    for name in ("qwen3", "llama3"):
        tok = AutoTokenizer.from_pretrained(f"{tokenizer_root}/{name}")
        for case_name, messages, extra in conversations():
            for add_gen in (False, True):
                kwargs = dict(extra)
                text = tok.apply_chat_template(
                    json.loads(json.dumps(messages)), tokenize=False,
                    add_generation_prompt=add_gen, **json.loads(json.dumps(kwargs)))
                entries.append({"tokenizer": name, "name": case_name, "messages": messages,
                                "add_generation_prompt": add_gen, "extra": extra,
                                "expected": text})
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(entries, f, ensure_ascii=True, indent=1)


BASE_CONTEXT = {
    "s": "héllo wörld",
    "n": None,
    "t": True,
    "f": False,
    "i": 7,
    "neg": -3,
    "x": 2.5,
    "l": [1, "a", None, True, 1.5, {"x": [1]}],
    "d": {"b": 2, "a": 1, "c": {"z": None}},
    "users": [{"name": "Ann", "age": 31, "admin": True},
              {"name": "bob", "age": 25, "admin": False},
              {"name": "Cy", "age": 31}],
    "words": ["b", "A", "a", "c", "B"],
    "msg": {"role": "user", "content": "  Hi there  ", "items": "shadowed"},
}

# Each entry: (name, template) or (name, template, extra context).
JINJA_CASES = [
    # output of values: Python str() of every type
    ("render_scalars", "{{ n }}|{{ t }}|{{ f }}|{{ i }}|{{ neg }}|{{ x }}|{{ s }}|{{ missing }}|"),
    ("render_containers", "{{ l }}|{{ d }}|{{ users[0] }}|{{ (1,) }}|{{ (1, 'a') }}|{{ () }}|{{ [] }}|{{ {} }}"),
    ("render_floats", "{{ 1.0 }} {{ 1e16 }} {{ 1e15 }} {{ 1e-5 }} {{ 0.0001 }} {{ 0.1 + 0.2 }} "
                      "{{ 123456789.123 }} {{ 1.5e-7 }} {{ -0.0 }} {{ 2.5e300 * 1e10 }} {{ 1/3 }}"),
    ("render_string_repr", "{{ [\"it's\", 'a\"b', 'a\\nb\\tc', \"x'y\\\"z\", 'back\\\\slash', 'é🤖'] }}"),
    ("render_control_repr", "{{ ['\\x01', '\\x7f', '\\u00a0', '\\u2028', '\\r'] }}"),
    ("render_none_in_list", "{{ [none, true, false, 1.0] }}"),
    # literals
    ("literal_strings", "{{ 'a' 'b' \"c\" }}|{{ '\\u00e9\\x41\\101\\q\\U0001F600' }}|{{ 'tab\\tq\\'' }}|{{ 'a\\\nb' }}"),
    ("literal_numbers", "{{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1_000 }} {{ 1_0.5e1 }} {{ 00 }}"),
    ("literal_bools", "{{ true }}{{ True }}{{ false }}{{ False }}{{ none }}{{ None }}"),
    ("literal_dict", "{{ {'k': 1, 'j': [1, 2], 3: 'int key'} }}"),
    # arithmetic
    ("arith", "{{ 7 + 3 }} {{ 7 - 10 }} {{ 7 * 3 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} "
              "{{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} "
              "{{ 2 ** -1 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ True + 1 }} {{ 1 + 2.0 }}"),
    ("arith_strings", "{{ 'ab' * 3 }}|{{ 3 * 'x' }}|{{ 'a' + 'b' }}|{{ [1] + [2, 3] }}|{{ [0] * 3 }}|"
                      "{{ 'x' * 0 }}|{{ 'a' ~ 1 ~ none ~ 2.0 ~ [1] }}|{{ missing ~ 'z' }}"),
    ("precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 10 - 2 - 3 }} {{ 2 * 3 ~ 4 }} {{ -x|abs }} "
                   "{{ l|length - 1 }} {{ not true or true }} {{ not (true or true) }}"),
    ("percent_format", "{{ '%s is %d years' % ('Ann', 31) }}|{{ '%.2f' % 3.14159 }}|{{ '%s' % 'solo' }}|{{ '100%%' % () }}"),
    # comparisons and logic
    ("compare", "{{ 1 < 2 }} {{ 2 <= 1 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 'abc' < 'abd' }} "
                "{{ [1, 2] < [1, 3] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ none == none }} "
                "{{ 1 == true }} {{ 'a' == 1 }} {{ missing == missing }} {{ l == [1] }}"),
    ("in_operator", "{{ 'll' in s }} {{ 1 in l }} {{ 'b' in d }} {{ 'z' not in d }} {{ 5 in [] }} "
                    "{{ 'x' in missing }} {{ none in l }} {{ 'role' in msg }}"),
    ("and_or_values", "{{ 0 or 'x' }}|{{ 1 and 'y' }}|{{ '' or [] }}|{{ none and 1 }}|{{ s or n }}"),
    ("ternary", "{{ 'yes' if t else 'no' }}|{{ 'yes' if f else 'no' }}|{{ 'x' if f }}|"
                "{{ 1 if f else 2 if t else 3 }}"),
    ("truthiness", "{% for v in [0, 1, '', 'a', [], [0], {}, none, 0.0, 'False'] %}"
                   "{{ 'T' if v else 'F' }}{% endfor %}{{ 'T' if missing else 'F' }}"),
    # attribute / item access
    ("access", "{{ d.b }} {{ d['a'] }} {{ d.c.z }} {{ users[1].name }} {{ users[-1]['age'] }} "
               "{{ l[10] }}|{{ d.nope }}|{{ msg.items is callable }}|{{ msg['items'] }}|{{ l.0 }}"),
    ("slicing", "{{ l[1:3] }} {{ l[-2:] }} {{ l[::-1] }} {{ l[::2] }} {{ s[::-1] }} {{ s[1:-1:2] }} "
                "{{ s[:3] }} {{ s[100:] }}|{{ l[5:1] }} {{ l[-100:2] }} {{ s[-3] }}"),
    ("dict_methods", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{{ d.keys()|list }}|"
                     "{{ d.values()|list }}|{{ d.get('a') }}|{{ d.get('zz') }}|{{ d.get('zz', 9) }}"),
    ("dict_iteration_order", "{% for k in d %}{{ k }}{% endfor %}|{{ d|list }}|{{ d|length }}"),
    # string methods
    ("str_methods", "{{ s.upper() }}|{{ 'ABC'.lower() }}|{{ 'hello world'.title() }}|"
                    "{{ 'hELLO'.capitalize() }}|{{ '  x  '.strip() }}|{{ 'xxaxx'.strip('x') }}|"
                    "{{ '\\n\\nab\\n'.lstrip('\\n') }}|{{ 'ab  '.rstrip() }}|{{ 'a-b-c'.replace('-', '+') }}|"
                    "{{ 'aaa'.replace('a', 'b', 2) }}|{{ s.startswith('hé') }}|{{ s.endswith(('x', 'ld')) }}"),
    ("str_split", "{{ 'a b  c '.split() }}|{{ 'a,b,,c'.split(',') }}|{{ 'a,b,c'.split(',', 1) }}|"
                  "{{ 'a,b,c'.rsplit(',', 1) }}|{{ '  a b  '.split(none, 1) }}|"
                  "{{ 'x</think>y</think>z'.split('</think>')[-1] }}|{{ 'l1\\nl2\\r\\nl3'.splitlines() }}"),
    ("str_search", "{{ s.find('l') }} {{ s.rfind('l') }} {{ s.find('q') }} {{ s.count('l') }} "
                   "{{ s.index('w') }} {{ '-'.join(['a', 'b']) }} {{ 'abc'.isalpha() }} "
                   "{{ '123'.isdigit() }} {{ 'ab1'.isalnum() }} {{ ' '.isspace() }} {{ 'abc'.islower() }} "
                   "{{ 'ABC'.isupper() }} {{ 'x'.center(5, '*') }} {{ 'x'.ljust(3) }}| {{ 'x'.rjust(3) }}"),
    ("str_unicode_methods", "{{ 'ÉCOLE ΣΊΣΥΦΟΣ'.lower() }}|{{ 'straße café'.upper() }}|"
                            "{{ s|length }}|{{ s[1] }}|{{ 'ça va'.title() }}|{{ s.replace('', '.') }}"),
    # tests
    ("tests_types", "{{ s is string }}{{ i is string }}{{ i is number }}{{ x is number }}{{ t is number }}"
                    "{{ i is integer }}{{ x is integer }}{{ t is integer }}{{ x is float }}{{ d is mapping }}"
                    "{{ l is mapping }}{{ l is sequence }}{{ s is sequence }}{{ d is iterable }}"
                    "{{ i is iterable }}{{ missing is iterable }}{{ t is boolean }}{{ i is boolean }}"),
    ("tests_values", "{{ n is none }}{{ missing is none }}{{ t is true }}{{ 1 is true }}{{ f is false }}"
                     "{{ 0 is false }}{{ missing is defined }}{{ missing is undefined }}{{ n is defined }}"
                     "{{ d.zz is defined }}{{ d.b is defined }}{{ d.items is defined }}{{ d.update is defined }}"
                     "{{ i is odd }}{{ i is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}"),
    ("tests_compare", "{{ 1 is eq 1 }}{{ 2 is gt 1 }}{{ 2 is lt 1 }}{{ 2 is ge 2 }}{{ 1 is le 0 }}"
                      "{{ 1 is ne 1 }}{{ 'a' is in 'cat' }}{{ 3 is in [1, 2] }}{{ 'abc' is lower }}"
                      "{{ 'Abc' is upper }}{{ range is callable }}{{ i is callable }}{{ 1 is sameas 1 }}"),
    ("tests_negated", "{{ n is not none }}{{ s is not string }}{{ missing is not defined }}"
                      "{{ not missing is defined }}"),
    # filters
    ("filter_basic", "{{ s|upper }}|{{ 'ABC'|lower }}|{{ '  x  '|trim }}|{{ 'xxyxx'|trim('x') }}|"
                     "{{ 'hello world'|title }}|{{ 'hELLO wORLD'|capitalize }}|{{ -3|abs }}|{{ -2.5|abs }}|"
                     "{{ 'a-b'|replace('-', '+') }}|{{ 'aaa'|replace('a', 'b', 1) }}|{{ s|length }}|"
                     "{{ l|count }}|{{ missing|length }}|{{ 5|string }}|{{ n|string }}|{{ [1,2]|string }}"),
    ("filter_default", "{{ missing|default('dflt') }}|{{ n|default('dflt') }}|{{ ''|default('e') }}|"
                       "{{ ''|default('e', true) }}|{{ missing|d('short') }}|{{ missing|default }}|"
                       "{{ 0|default(5, boolean=true) }}"),
    ("filter_join", "{{ [1, 'a', none]|join }}|{{ words|join(', ') }}|{{ users|join(',', attribute='name') }}|"
                    "{{ 'abc'|join('-') }}|{{ d|join('+') }}"),
    ("filter_first_last", "{{ l|first }}|{{ l|last }}|{{ []|first }}|{{ 'xyz'|first }}|{{ 'xyz'|last }}|"
                          "{{ d|first }}"),
    ("filter_list", "{{ s|list }}|{{ d|list }}|{{ (1, 2)|list }}|{{ missing|list }}|{{ d|items|list }}"),
    ("filter_int_float", "{{ '42'|int }}|{{ '42.7'|int }}|{{ 'x'|int }}|{{ 'x'|int(-1) }}|{{ 3.9|int }}|"
                         "{{ -3.9|int }}|{{ true|int }}|{{ ' 7 '|int }}|{{ '0x1A'|int(0, 16) }}|"
                         "{{ '2.5'|float }}|{{ 3|float }}|{{ 'bad'|float }}|{{ 'bad'|float(1.5) }}|"
                         "{{ '1e3'|float }}|{{ n|int }}"),
    ("filter_round", "{{ 2.5|round }}|{{ 3.5|round }}|{{ 2.675|round(2) }}|{{ 42.55|round(1, 'floor') }}|"
                     "{{ 42.51|round(1, 'ceil') }}|{{ 7|round }}|{{ 1234.5|round(-2) }}|{{ 0.125|round(2) }}"),
    ("filter_map", "{{ users|map(attribute='name')|list }}|{{ users|map(attribute='admin', default=0)|list }}|"
                   "{{ words|map('upper')|join }}|{{ ['1', '2']|map('int')|sum }}|"
                   "{{ users|map(attribute='missing')|list }}"),
    ("filter_select", "{{ users|selectattr('admin')|map(attribute='name')|list }}|"
                      "{{ users|rejectattr('admin')|map(attribute='name')|list }}|"
                      "{{ users|selectattr('age', 'equalto', 31)|map(attribute='name')|join(',') }}|"
                      "{{ users|selectattr('name', 'in', ['bob', 'Cy'])|list|length }}|"
                      "{{ [1, 2, 3, 4]|select('odd')|list }}|{{ [1, 2, 3, 4]|reject('even')|list }}|"
                      "{{ [0, 1, '', 'a', none]|select|list }}|{{ [1, 5, 9]|select('gt', 4)|list }}"),
    ("filter_unique_sort", "{{ words|unique|list }}|{{ words|unique(case_sensitive=true)|list }}|"
                           "{{ words|sort }}|{{ words|sort(case_sensitive=true) }}|{{ words|sort(reverse=true) }}|"
                           "{{ users|sort(attribute='age')|map(attribute='name')|join }}|"
                           "{{ users|sort(attribute='age,name')|map(attribute='name')|join }}|"
                           "{{ [3, 1, 2]|sort }}|{{ users|unique(attribute='age')|map(attribute='name')|join }}"),
    ("filter_min_max_sum", "{{ [3, 1, 2]|min }}{{ [3, 1, 2]|max }}{{ words|min }}{{ words|max }}"
                           "{{ users|max(attribute='age')|attr('name') }}|{{ [1, 2.5]|sum }}|"
                           "{{ users|sum(attribute='age') }}|{{ []|sum(start=10) }}|{{ []|max }}"),
    ("filter_reverse", "{{ 'abc'|reverse }}|{{ [1, 2, 3]|reverse|list }}|{{ (1, 2)|reverse|list }}"),
    ("filter_dictsort", "{{ d|dictsort }}|{{ {'B': 1, 'a': 2}|dictsort }}|"
                        "{{ {'B': 1, 'a': 2}|dictsort(true) }}|{{ {'x': 2, 'y': 1}|dictsort(by='value') }}|"
                        "{{ d|dictsort(reverse=true)|first }}"),
    ("filter_indent", "[{{ 'a\\nb\\n\\nc'|indent }}]|[{{ 'a\\nb'|indent(2, true) }}]|"
                      "[{{ 'a\\n\\nb'|indent(1, blank=true) }}]|[{{ 'x\\ny'|indent('> ') }}]|[{{ ''|indent }}]"),
    ("filter_misc", "{{ '<a href=\"x\">&\\'</a>'|e }}|{{ '<b>'|escape }}|{{ 'x'|safe }}|{{ 'a b  c'|wordcount }}|"
                    "{{ 'x'|center(5) }}|{{ [1, 2, 3, 4, 5]|batch(2)|list }}|{{ [1, 2, 3]|batch(2, 0)|list }}|"
                    "{{ '%s-%s'|format('a', 1) }}|{{ d|attr('keys') is callable }}"),
    ("filter_items", "{% for k, v in d|items %}{{ k }}:{{ v }} {% endfor %}|{% for k, v in missing|items %}x{% endfor %}"),
    ("tojson_basic", "{{ l|tojson }}|{{ d|tojson }}|{{ s|tojson }}|{{ 'a\"b\\\\c\\n\\t\\x01\\u2028'|tojson }}|"
                     "{{ n|tojson }}|{{ 1.0|tojson }}|{{ 1e20|tojson }}|{{ (1, 2)|tojson }}|{{ {}|tojson }}"),
    ("tojson_options", "{{ d|tojson(indent=2) }}|{{ l|tojson(indent=4) }}|{{ []|tojson(indent=2) }}|"
                       "{{ d|tojson(sort_keys=true) }}|{{ s|tojson(ensure_ascii=true) }}|"
                       "{{ '🤖'|tojson(ensure_ascii=true) }}|{{ d|tojson(separators=(',', ':')) }}|"
                       "{{ d|tojson(indent='\\t') }}|{{ {'a': [1, {'b': []}]}|tojson(indent=0) }}|"
                       "{{ d|tojson(indent=2, separators=(', ', ' = ')) }}|{{ {1: 'x', true: 2}|tojson }}"),
    ("tojson_users", "{% for u in users %}{{ u|tojson }}\n{% endfor %}"),
    # whitespace control
    ("ws_trim_blocks", "A\n{% if true %}\nB\n{% endif %}\nC\n"),
    ("ws_lstrip_blocks", "A\n    {% if true %}\n    B\n    {% endif %}\n  {# comment #}\n  {{ 'V' }}\nC"),
    ("ws_minus", "A   {{- 'x' -}}   B\n\n{%- if true -%}\n\n  C  \n{%- endif %}  D"),
    ("ws_plus", "A\n    {%+ if true +%}\nB\n    {%+ endif %}\nC"),
    ("ws_comment_minus", "a  {#- c -#}  b\n{# c2 #}\nc"),
    ("ws_raw", "{% raw %}{{ not evaluated }} {% if %}{% endraw %}|\n  {%- raw -%}  x  {%- endraw %}"),
    ("ws_crlf", "line1\r\n{% if true %}\r\nline2\r\n{% endif %}\r\nline3\r\n"),
    ("ws_trailing_newline", "text\n"),
    ("ws_two_trailing_newlines", "text\n\n"),
    ("ws_variable_not_lstripped", "A\n    {{ 'x' }}\n  {% set y = 1 %}\nB"),
    ("ws_tabs", "\t{% if true %}\tx\n\t{% endif %}\ty"),
    ("ws_start_lstrip", "   {% if true %}x{% endif %}\n   {%- if true %}y{% endif %}"),
    ("ws_unicode_space", "a\n\u3000 {% if true %}b{% endif %}\n\x0c{% if true %}c{% endif %}"),
    ("ws_minus_plus_mix", "a \n {%- if true +%}\nb\n {%+ endif -%} \n c"),
    ("ws_comment_lstrip_trim", "x\n  {# c #}\ny\n  {#- d -#}  \nz\n  {#+ e #}\nw"),
    ("ws_variable_minus_newlines", "a\n\n{{- 'b' -}}\n\nc {{+ 'd' }}"),
    ("ws_raw_lstrip", "x\n   {% raw %}  r  {% endraw %}\ny\n  {%- raw %} s {% endraw -%}  \nz"),
    ("ws_not_line_start", "{{ 'v' }}   {% if true %}w{% endif %}"),
    ("ws_block_end_newline_then_spaces", "{% if true %}\n   {% endif %}z"),
    ("ws_minus_end_eats_all", "{% if true -%}   \n\n  x{%- endif %}"),
    ("ws_empty_lines_between_blocks", "{% for i in [1, 2] %}\n\n{{ i }}\n\n{% endfor %}\n"),
    ("expr_precedence_tests", "{{ 1 + 1 is odd }} {{ not 'a' in 'abc' }} {{ 'a' if 0 else 'b' if 0 else 'c' }} "
                              "{{ 1, 2 }} {{ 'a' ~ 2|string }} {{ [1, 2, 3]|length * 2 }} {{ -1|abs }}"),
    ("expr_float_ops", "{{ 10 / 4 * 2 }} {{ 2 ** 0.5 }} {{ 10 // 3.0 }} {{ -10 % 3.5 }} {{ 1e3 }} {{ 3 * 1.1 }} "
                       "{{ 2 ** 62 }} {{ 9223372036854775807 }} {{ 0.1 * 3 }} {{ 1e-7 }} {{ 5e-324 }}"),
    ("expr_nested_subscripts", "{{ users[0]['name'][0] }}{{ d['c']['z'] is none }}{{ [1, 2, 3, 4, 5][4:1:-2] }}"
                               "{{ 'abcdef'[-1:-4:-1] }}{{ (d|attr('get'))('a') }}{{ d.c.get('z', 'dflt') }}"),
    ("macro_sees_later_globals", "{% set x = 1 %}{% macro m() %}{{ x }}{% endmacro %}{% set x = 2 %}{{ m() }}"),
    ("set_in_if_in_loop", "{% for i in [1, 2] %}{% if i == 2 %}{% set hit = i %}{% endif %}[{{ hit }}]{% endfor %}"),
    ("loop_var_after_loop", "{% for i in [1, 2] %}{% endfor %}[{{ i }}]{% set i = 5 %}{% for i in [7] %}{{ i }}{% endfor %}{{ i }}"),
    # control structures
    ("if_elif_else", "{% for v in [1, 2, 3] %}{% if v == 1 %}one{% elif v == 2 %}two{% else %}other{% endif %},{% endfor %}"),
    ("for_loop_vars", "{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
                      "{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}"
                      "[{{ loop.previtem }}|{{ loop.nextitem }}]{{ loop.depth }};{% endfor %}"),
    ("for_cycle_changed", "{% for x in [1, 1, 2, 3, 3] %}{{ loop.cycle('odd', 'even') }}"
                          "{{ '!' if loop.changed(x) }} {% endfor %}"),
    ("for_else", "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in [1] %}{{ x }}{% else %}e{% endfor %}"),
    ("for_filter", "{% for u in users if u.age > 30 %}{{ loop.index }}/{{ loop.length }}:{{ u.name }}"
                   "{{ ',' if not loop.last }}{% endfor %}"),
    ("for_unpack", "{% for a, b in [[1, 2], (3, 4)] %}{{ a }}{{ b }}{% endfor %}|"
                   "{% for (a, b), c in [((1, 2), 3)] %}{{ a }}{{ b }}{{ c }}{% endfor %}|"
                   "{% for k, v in {'x': 1}.items() %}{{ k }}{{ v }}{% endfor %}"),
    ("for_string_and_dict", "{% for ch in 'hé!' %}[{{ ch }}]{% endfor %}{% for k in {'p': 1, 'q': 2} %}{{ k }}{% endfor %}"),
    ("for_nested_loop", "{% for a in [1, 2] %}{% for b in ['x', 'y'] %}{{ a }}{{ b }}{{ loop.index }} {% endfor %}"
                        "{{ loop.index }}|{% endfor %}"),
    ("for_undefined", "{% for x in missing %}x{% else %}none{% endfor %}"),
    ("break_continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}"
                       "{% break %}{% endif %}{{ i }}{% endfor %}|{% for a in [1, 2] %}{% for b in [3, 4] %}"
                       "{% if b == 4 %}{% break %}{% endif %}{{ a }}{{ b }}{% endfor %}{% endfor %}"),
    ("range_global", "{{ range(3)|list }}{{ range(1, 4)|list }}{{ range(10, 0, -3)|list }}{{ range(0)|list }}"),
    ("scoping", "{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}|"
                "{% for i in range(2) %}{{ y }}{% set y = i %}{% endfor %}[{{ y }}]|"
                "{% if true %}{% set z = 5 %}{% endif %}{{ z }}"),
    ("namespace", "{% set ns = namespace(count=0, found=false, items=[]) %}"
                  "{% for u in users %}{% set ns.count = ns.count + 1 %}{% if u.admin %}{% set ns.found = true %}"
                  "{% endif %}{% set ns.items = ns.items + [u.name] %}{% endfor %}"
                  "{{ ns.count }} {{ ns.found }} {{ ns.items }} {{ ns.missing }}|{{ ns }}"),
    ("set_forms", "{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set t = 1, 'x' %}{{ t }}|{% set blk %}inner {{ a }}"
                  "{% endset %}[{{ blk }}]|{% set up | upper %}shout{% endset %}{{ up }}"),
    ("with_block", "{% set v = 'outer' %}{% with v = 'inner', w = 2 %}{{ v }}{{ w }}{% endwith %}{{ v }}{{ w }}"),
    ("macro_basic", "{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}"
                    "{{ greet('Ann') }} {{ greet('Bob', 'Hi') }} {{ greet(greeting='Yo', name='Cy') }} [{{ greet() }}]"),
    ("macro_varargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k='v') }}"),
    ("macro_recursion", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}"
                        "{% endmacro %}{{ fact(5) }}"),
    ("call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}"
                   "{% call wrap('b') %}bold {{ s }}{% endcall %}|{% macro each(xs) %}{% for x in xs %}"
                   "{{ caller(x) }}{% endfor %}{% endmacro %}{% call(item) each([1, 2]) %}<{{ item }}>{% endcall %}"),
    ("filter_block", "{% filter upper %}shout {{ s }}{% endfilter %}|{% filter replace('a', 'o')|title %}"
                     "banana{% endfilter %}"),
    ("print_and_generation", "{% print 'p' %}{% generation %}gen {{ i }}{% endgeneration %}"),
    ("dict_global", "{{ dict(a=1, b=2) }}{{ dict([('x', 1)]) }}{{ dict({'k': 'v'}, z=0) }}"),
    ("comment_only", "{# just a comment #}"),
    ("multiline_tag", "{{\n  'a'\n  ~ 'b'\n}}{%\n  if true\n%}c{%\n  endif\n%}"),
    ("brace_balancing", "{{ {'a': {'b': 1}} }}|{{ {'k': [1, {'m': 2}]}['k'][1]['m'] }}"),
    ("string_with_tags", "{{ '{{ not a tag }}' }}|{{ \"{% also %}\" }}|{{ '#}' }}"),
    ("qwen_style_reverse", "{% set ns = namespace(last=-1) %}{% for m in users[::-1] %}"
                           "{% set idx = (users|length - 1) - loop.index0 %}{% if m.age == 31 and ns.last == -1 %}"
                           "{% set ns.last = idx %}{% endif %}{% endfor %}{{ ns.last }}"),
    ("undefined_behaviour", "[{{ missing }}]{{ missing|string }}{{ missing is defined }}{{ missing|upper }}"
                            "{{ missing|trim }}{{ missing|join }}{{ missing|first is defined }}"),
    ("strftime_year", "{{ strftime_now('%Y')|length }}"),
    ("bool_arith_compare", "{{ true * 3 }} {{ false + 0.5 }} {{ true == 1.0 }} {{ [true] == [1] }} {{ {1: 'a'}[true] }}"),
    ("nested_data", "{{ users|selectattr('admin', 'defined')|map(attribute='name')|join(',') }}|"
                    "{{ users|map(attribute='name')|map('lower')|select('in', ['ann', 'cy'])|list }}"),
    # composite templates in the style of modern HF chat templates (tools, macros, reasoning)
    ("composite_tool_listing",
     "{% macro render_list(items, tag='required') %}"
     "{%- if items is defined and items is iterable and items|length > 0 %}"
     "{%- if tag %}{{- '\n<' ~ tag ~ '>' -}}{% endif %}[{%- for it in items -%}"
     "{%- if loop.index > 1 %}{{- ', ' }}{% endif -%}"
     "{%- if it is string -%}{{ '`' ~ it ~ '`' }}{%- else -%}{{ it }}{%- endif -%}{%- endfor -%}]"
     "{%- if tag %}{{- '</' ~ tag ~ '>' -}}{% endif %}{%- endif %}\n{% endmacro %}\n"
     "{%- for tool in tools %}\n"
     "    {%- if tool.function is defined %}{%- set tool = tool.function %}{%- endif %}\n"
     "    {{- '<function>' ~ tool.name ~ '\\n' ~ (tool.description | trim) }}\n"
     "    {%- for pname, pfields in tool.parameters.properties|items %}\n"
     "        {{- '\\n<param ' ~ pname ~ '>' }}\n"
     "        {%- if pfields.type is defined %}{{- (pfields.type | string) }}{%- endif %}\n"
     "        {{- render_list(pfields.enum, 'enum') }}\n"
     "        {%- for key in pfields.keys() | reject('in', ['type', 'description', 'enum']) %}\n"
     "            {%- set norm = key | replace('-', '_') | replace('$', '') %}\n"
     "            {%- if pfields[key] is mapping %}{{- '\\n<' ~ norm ~ '>' ~ (pfields[key] | tojson | safe) }}\n"
     "            {%- else %}{{- '\\n<' ~ norm ~ '>' ~ (pfields[key] | string) }}{%- endif %}\n"
     "        {%- endfor %}\n"
     "    {%- endfor %}\n"
     "    {{- render_list(tool.parameters.required) }}\n"
     "{%- endfor %}",
     {"tools": [
         {"type": "function", "function": {
             "name": "lookup", "description": "  Find things. ",
             "parameters": {"type": "object", "required": ["q", "n"], "properties": {
                 "q": {"type": "string", "description": "query", "max-len": 40},
                 "n": {"type": ["integer", "null"], "enum": [1, 2, 3], "$ref": {"a": "b"}},
                 "mode": {"enum": ["fast", "slow"], "default": None, "nested": {"x": [1, 2.5, True]}}}}}},
         {"name": "bare", "description": "no params", "parameters": {"properties": {}}}]}),
    ("composite_tool_calls",
     "{%- for message in messages %}\n"
     "{%- if message.role == 'assistant' and message.tool_calls is defined and message.tool_calls|length > 0 %}\n"
     "    {{- '<|assistant|>' }}\n"
     "    {%- if message.content is defined and message.content is string and message.content|trim|length > 0 %}"
     "{{- '\\n' + message.content|trim + '\\n' }}{%- endif %}\n"
     "    {%- for tc in message.tool_calls %}\n"
     "        {%- if tc.function is defined %}{%- set tc = tc.function %}{%- endif %}\n"
     "        {{- '<call ' + tc.name + '>' }}\n"
     "        {%- for k, v in tc.arguments|items %}\n"
     "            {%- set v = v if v is string else v | string %}\n"
     "            {{- k + '=' + v + ';' }}\n"
     "        {%- endfor %}\n"
     "        {{- '|json:' ~ tc.arguments|tojson }}\n"
     "    {%- endfor %}\n"
     "{%- elif message.role == 'tool' %}\n"
     "    {%- if loop.previtem and loop.previtem.role != 'tool' %}{{- '<tools>' }}{%- endif %}\n"
     "    {{- '[' ~ message.content ~ ']' }}\n"
     "    {%- if not loop.last and loop.nextitem.role != 'tool' %}{{- '</tools>' }}"
     "{%- elif loop.last %}{{- '</tools>' }}{%- endif %}\n"
     "{%- else %}\n"
     "    {{- '<|' + message.role + '|>' + message.content }}\n"
     "{%- endif %}\n"
     "{%- endfor %}",
     {"messages": [
         {"role": "user", "content": "go"},
         {"role": "assistant", "content": "  calling  ", "tool_calls": [
             {"type": "function", "function": {"name": "f", "arguments": {
                 "s": "str", "n": 3, "x": 1.5, "b": False, "none": None, "l": [1, "two", {"k": "v'q"}],
                 "d": {"é": "ü", "quote": "it's \"x\""}}}},
             {"name": "g", "arguments": {}}]},
         {"role": "tool", "content": "r1"},
         {"role": "tool", "content": "r2"},
         {"role": "user", "content": "thanks"},
         {"role": "tool", "content": "late"}]}),
    ("composite_llama_style",
     "{{- bos_token }}\n"
     "{%- if custom_tools is defined %}{%- set tools = custom_tools %}{%- endif %}\n"
     "{%- if not tools_in_user_message is defined %}{%- set tools_in_user_message = true %}{%- endif %}\n"
     "{%- if not date_string is defined %}\n"
     "    {%- if strftime_now is defined %}{%- set date_string = 'today' %}\n"
     "    {%- else %}{%- set date_string = '26 Jul 2024' %}{%- endif %}\n"
     "{%- endif %}\n"
     "{%- if not tools is defined %}{%- set tools = none %}{%- endif %}\n"
     "{#- pull out the system message #}\n"
     "{%- if messages[0]['role'] == 'system' %}\n"
     "    {%- set system_message = messages[0]['content']|trim %}\n"
     "    {%- set messages = messages[1:] %}\n"
     "{%- else %}\n"
     "    {%- set system_message = '' %}\n"
     "{%- endif %}\n"
     "{{- '<|sys|>\\n\\n' }}\n"
     "{%- if builtin_tools is defined or tools is not none %}{{- 'Environment: ipython\\n' }}{%- endif %}\n"
     "{%- if builtin_tools is defined %}{{- 'Tools: ' + builtin_tools | reject('equalto', 'code_interpreter') | join(', ') + '\\n\\n' }}{%- endif %}\n"
     "{{- 'Date: ' + date_string + '\\n\\n' }}\n"
     "{%- if tools is not none and not tools_in_user_message %}\n"
     "    {%- for t in tools %}{{- t | tojson(indent=4) }}{{- '\\n\\n' }}{%- endfor %}\n"
     "{%- endif %}\n"
     "{{- system_message }}{{- '<|eot|>' }}\n"
     "{%- if tools_in_user_message and not tools is none %}\n"
     "    {%- if messages | length != 0 %}\n"
     "        {%- set first_user_message = messages[0]['content']|trim %}\n"
     "        {%- set messages = messages[1:] %}\n"
     "    {%- else %}\n"
     "        {{- raise_exception('no first user message') }}\n"
     "{%- endif %}\n"
     "    {{- '<|user|>\\n\\n' -}}\n"
     "    {%- for t in tools %}{{- t | tojson(indent=4) }}{{- '\\n\\n' }}{%- endfor %}\n"
     "    {{- first_user_message + '<|eot|>'}}\n"
     "{%- endif %}\n"
     "{%- for message in messages %}\n"
     "    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}\n"
     "        {{- '<|' + message['role'] + '|>\\n\\n'+ message['content'] | trim + '<|eot|>' }}\n"
     "    {%- elif 'tool_calls' in message %}\n"
     "        {%- if not message.tool_calls|length == 1 %}{{- raise_exception('single tool call only') }}{%- endif %}\n"
     "        {%- set tool_call = message.tool_calls[0].function %}\n"
     "        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}\n"
     "            {{- '<|python_tag|>' + tool_call.name + '.call(' }}\n"
     "            {%- for arg_name, arg_val in tool_call.arguments | items %}\n"
     "                {{- arg_name + '=\"' + arg_val + '\"' }}{%- if not loop.last %}{{- ', ' }}{%- endif %}\n"
     "            {%- endfor %}{{- ')' }}\n"
     "        {%- else %}\n"
     "            {{- '{\"name\": \"' + tool_call.name + '\", \"parameters\": ' }}{{- tool_call.arguments | tojson }}{{- '}' }}\n"
     "        {%- endif %}\n"
     "        {{- '<|eom|>' if builtin_tools is defined else '<|eot|>' }}\n"
     "    {%- elif message.role == 'tool' or message.role == 'ipython' %}\n"
     "        {{- '<|ipython|>\\n\\n' }}\n"
     "        {%- if message.content is mapping or message.content is iterable %}{{- message.content | tojson }}\n"
     "        {%- else %}{{- message.content }}{%- endif %}\n"
     "        {{- '<|eot|>' }}\n"
     "    {%- endif %}\n"
     "{%- endfor %}\n"
     "{%- if add_generation_prompt %}{{- '<|assistant|>\\n\\n' }}{%- endif %}\n",
     {"bos_token": "<s>", "add_generation_prompt": True, "builtin_tools": ["brave_search", "code_interpreter"],
      "tools": [{"type": "function", "function": {"name": "get", "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}}],
      "messages": [
          {"role": "system", "content": "  Be nice.  "},
          {"role": "user", "content": " first question "},
          {"role": "assistant", "tool_calls": [{"function": {"name": "brave_search", "arguments": {"query": "x", "lang": "en"}}}]},
          {"role": "ipython", "content": {"result": [1, 2]}},
          {"role": "assistant", "tool_calls": [{"function": {"name": "get", "arguments": {"a": "é"}}}]},
          {"role": "tool", "content": 42},
          {"role": "user", "content": "bye"}]}),
    ("composite_reasoning_modes",
     "{# ───── defaults ───── #}\n"
     "{%- if enable_thinking is not defined -%}{%- set enable_thinking = true -%}{%- endif -%}\n"
     "{%- if enable_thinking -%}{%- set mode = '/think' -%}{%- else -%}{%- set mode = '/no_think' -%}{%- endif -%}\n"
     "{{- '<|system|>\\n' -}}\n"
     "{%- if messages[0].role == 'system' -%}\n"
     "{%- set sys = messages[0].content -%}\n"
     "{%- if '/no_think' in sys -%}{%- set mode = '/no_think' -%}{%- elif '/think' in sys -%}{%- set mode = '/think' -%}{%- endif -%}\n"
     "{%- set custom = sys.replace('/no_think', '').replace('/think', '').rstrip() -%}\n"
     "{%- endif -%}\n"
     "{%- if '/override' in sys -%}{{- custom.replace('/override', '').rstrip() -}}\n"
     "{%- else -%}\n"
     "{{- 'Mode: ' + mode + '\\n' -}}\n"
     "{%- if custom -%}{{- custom + '\\n\\n' -}}{%- endif -%}\n"
     "{%- if xml_tools -%}\n"
     "  {%- set ns = namespace(s='<tools>\\n') -%}\n"
     "  {%- for tool in xml_tools[:] -%} {# slicing keeps it a list #}\n"
     "    {%- set ns.s = ns.s ~ (tool | string) ~ '\\n' -%}\n"
     "  {%- endfor -%}\n"
     "  {{- ns.s + '</tools>' -}}\n"
     "{%- endif -%}\n"
     "{%- endif -%}\n"
     "{%- for message in messages -%}\n"
     "{%- set content = message.content if message.content is string else '' -%}\n"
     "{%- if message.role == 'user' -%}\n"
     "    {{ '<|user|>' + content }}\n"
     "{%- elif message.role == 'assistant' -%}\n"
     "    {% generation %}\n"
     "    {%- if mode == '/think' -%}{{ '<|assistant|>' + content.lstrip('\\n') }}\n"
     "    {%- else -%}{{ '<|assistant|><think></think>' + content.lstrip('\\n') }}{%- endif -%}\n"
     "    {% endgeneration %}\n"
     "{%- endif -%}\n"
     "{%- endfor -%}\n",
     {"enable_thinking": False,
      "xml_tools": [{"name": "t1", "args": {"q": "it's", "n": None, "f": 1.0}}, {"name": "t2"}],
      "messages": [{"role": "system", "content": "Custom rules /think  "},
                   {"role": "user", "content": "hi"},
                   {"role": "assistant", "content": "\n\nhello"},
                   {"role": "assistant", "content": ["not", "a string"]}]}),
    ("composite_alternation_check",
     "{{ bos_token }}{% for message in messages %}"
     "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
     "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
     "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
     "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}"
     "{% set user_messages = messages | selectattr('role', 'equalto', 'user') | list %}"
     "{{ messages[-2] == user_messages[-1] }}{{ messages[0] == user_messages[-1] }}",
     {"bos_token": "<s>", "eos_token": "</s>", "messages": [
         {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
         {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}]}),
    ("composite_documents",
     "{%- if documents %}{%- for document in documents %}"
     "{{- '<doc id=\"' + document['doc_id'] | string + '\">' + document['text'] + '</doc>\\n' }}"
     "{%- endfor %}{%- endif %}"
     "{%- if 'citations' in controls and documents %}cite{%- endif %}"
     "{%- if controls %}{{- ' ' + controls | tojson() }}{%- endif %}",
     {"documents": [{"doc_id": 7, "text": "seven"}, {"doc_id": "x", "text": "ex"}]}),
    # errors (jinja2 raises; furlong must raise a furlong::Error too)
    ("err_raise_exception", "{{ raise_exception('Only user and assistant roles are supported!') }}"),
    ("err_undefined_attr", "{{ missing.attr }}"),
    ("err_undefined_item", "{{ missing[0] }}"),
    ("err_undefined_call", "{{ missing() }}"),
    ("err_undefined_arith", "{{ missing + 1 }}"),
    ("err_type_add", "{{ 'a' + 1 }}"),
    ("err_type_compare", "{{ 'a' < 1 }}"),
    ("err_div_zero", "{{ 1 / 0 }}"),
    ("err_mod_zero", "{{ 1 % 0 }}"),
    ("err_not_iterable", "{% for x in 5 %}{% endfor %}"),
    ("err_unpack", "{% for a, b in [[1, 2, 3]] %}{% endfor %}"),
    ("err_tojson_undefined", "{{ missing|tojson }}"),
    ("err_set_non_namespace", "{% set d.x = 1 %}"),
    ("err_namespace_underscore", "{% set ns = namespace() %}{% set ns._x = 1 %}"),
    ("err_range_too_big", "{{ range(200000)|length }}"),
    ("err_unclosed_block", "{% if true %}x"),
    ("err_unclosed_tag", "{{ 'x' "),
    ("err_bad_token", "{{ 1 ! 2 }}"),
    ("err_unknown_tag", "{% frobnicate %}"),
    ("err_stray_end", "{% endif %}"),
    ("err_empty_expr", "{{ }}"),
    ("err_unbalanced", "{{ (1 }}"),
    ("err_str_in_int", "{{ 'a' in 5 }}"),
    ("err_call_non_callable", "{{ i() }}"),
    ("err_modify_list", "{{ l.append(1) }}"),
    ("err_slice_step_zero", "{{ [1, 2, 3][::0] }}"),
    ("err_macro_out_of_scope", "{% for i in [1] %}{% macro m() %}{{ i }}{% endmacro %}{% endfor %}{{ m() }}"),
    ("err_bad_escape", "{{ '\\N' }}"),
    ("err_bad_hex_escape", "{{ '\\x4' }}"),
    ("err_alternation", "{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}"
                        "{{ raise_exception('roles must alternate') }}{% endif %}{% endfor %}",
     {"messages": [{"role": "assistant", "content": "x"}]}),
]


def jinja_cases(out_path):
    from transformers.utils.chat_template_utils import _compile_jinja_template

    entries = []
    for case in JINJA_CASES:
        name, template = case[0], case[1]
        context = dict(BASE_CONTEXT)
        if len(case) > 2:
            context.update(case[2])
        entry = {"name": name, "template": template, "context": context}
        try:
            entry["expected"] = _compile_jinja_template(template).render(**context)
        except Exception as e:  # noqa: BLE001 - the exception type is the expected result
            entry["error"] = type(e).__name__
        entries.append(entry)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(entries, f, ensure_ascii=True, indent=1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["golden", "jinja"])
    parser.add_argument("--tokenizers", help="directory holding qwen3/ and llama3/")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if args.mode == "golden":
        if not args.tokenizers:
            parser.error("golden needs --tokenizers")
        golden(args.tokenizers, args.out)
    else:
        jinja_cases(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
