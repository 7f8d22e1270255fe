#!/usr/bin/env python3
"""Writes tests/chat/jinja_cases.json: small Jinja templates rendered by Python jinja2 set up
the way transformers.apply_chat_template sets it up (ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, loopcontrols, transformers' tojson, raise_exception). The C++
engine's unit test (tests/chat/jinja_cases_test.cc) must reproduce every expected string, and
must fail wherever jinja2 raised.

Deterministic: fixed inputs, no randomness. Run from the repository root:
    python3 tools/make_jinja_cases.py
Needs jinja2 3.1 (pip install jinja2).
"""
import json
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers' override: no HTML escaping, json.dumps options exposed.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


ENV = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=["jinja2.ext.loopcontrols"])
ENV.filters["tojson"] = tojson
ENV.globals["raise_exception"] = raise_exception

MSGS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}]

# (name, template, context)
CASES = [
    # --- whitespace control ---
    ("trim_blocks", "{% if true %}\nyes\n{% endif %}\nend", {}),
    ("lstrip_blocks", "a\n    {% if true %}\n    b\n    {% endif %}\nc", {}),
    ("lstrip_plus", "a\n    {%+ if true %}b{% endif %}", {}),
    ("trim_plus", "{% if true +%}\nb{% endif %}", {}),
    ("dash_both", "a   {%- if true -%}   b   {%- endif -%}   c", {}),
    ("dash_var", "a  \n {{- 'x' -}} \n  b", {}),
    ("var_no_lstrip", "a\n  {{ 'x' }}\n", {}),
    ("comment", "a\n  {# note #}\nb {#- x -#} c", {}),
    ("trailing_newline_dropped", "line\n", {}),
    ("crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n", {}),
    ("raw", "{% raw %}{{ not parsed }}{% endraw %}", {}),
    ("text_only_braces", "a { b } c {", {}),
    # --- literals and printing ---
    ("print_none_bools", "{{ none }} {{ None }} {{ true }} {{ False }}", {}),
    ("print_numbers", "{{ 1 }} {{ 1.0 }} {{ 0.1 }} {{ 1e16 }} {{ 1.5e-7 }} {{ 1_000 }} {{ 2.50 }}", {}),
    ("print_list_repr", "{{ [1, 'a', none, true, 1.5, (1,), {'k': \"it's\"}] }}", {}),
    ("print_dict_repr", "{{ d }}", {"d": {"b": [1, {"x": None}], "a": "q\"uote", "c": "n\nl"}}),
    ("int_literals", "{{ 0x10 }} {{ 0o17 }} {{ 0b101 }} {{ 0X1_f }} {{ 00 }} {{ 0_0 }} {{ 00.5 }} {{ 0e3 }} {{ 1_0 }}", {}),
    ("err_leading_zero", "{{ 08 }}", {}),
    ("print_tuple", "{{ (1, 2) }} {{ () }} {{ (1,) }}", {}),
    ("string_escapes", "{{ 'a\\tb\\n\\\\\\'\\u00e9\\x41' }}|{{ \"dq\\\"\" }}", {}),
    ("adjacent_strings", "{{ 'a' 'b' \"c\" }}", {}),
    ("unicode_repr", "{{ ['caf\u00e9', '\u200d', 'x\u00a0y', '\U0001F600'] }}", {}),
    ("undefined_prints_empty", "[{{ nothing }}][{{ nothing is defined }}][{{ d.missing }}]", {"d": {}}),
    # --- arithmetic ---
    ("int_float_ops", "{{ 1/2 }} {{ 4/2 }} {{ 7//2 }} {{ -7//2 }} {{ -7 % 3 }} {{ 7.5 // 2 }} {{ 2**10 }} {{ 2**-1 }} {{ 2**3**2 }}", {}),
    ("mixed_ops", "{{ 1 + 2.5 }} {{ 3 * 'ab' }} {{ [1] * 2 }} {{ [1] + [2] }} {{ 'a' ~ 1 ~ none }}", {}),
    ("precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ -2 ** 2 }} {{ 10 - 2 - 3 }} {{ not 1 == 2 }}", {}),
    ("filter_binds_tight", "{{ xs|length - 1 }} {{ 'a' ~ xs|join ~ 'b' }}", {"xs": [1, 2, 3]}),
    ("err_neg_before_filter", "{{ -xs|length }}", {"xs": [1, 2, 3]}),
    ("comparisons", "{{ 1 < 2 < 3 }} {{ 1 < 2 > 3 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' != 'b' }}", {}),
    ("in_not_in", "{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in d }} {{ 'z' not in d }} {{ 'x' in nothing }}", {"d": {"k": 1}}),
    ("and_or_values", "{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ '' and 'b' }} {{ none or [] }}", {}),
    ("ternary", "{{ 'y' if 1 else 'n' }} {{ 'y' if 0 else 'n' }} [{{ 'y' if 0 }}]", {}),
    # --- errors ---
    ("err_str_plus_list", "{{ 'a' + [1] }}", {}),
    ("err_str_plus_none", "{{ 'a' + none }}", {}),
    ("err_str_plus_dict", "{{ 'a' + {} }}", {}),
    ("err_int_plus_str", "{{ 1 + 'a' }}", {}),
    ("err_in_none", "{{ 'a' in none }}", {}),
    ("err_undefined_attr", "{{ nothing.attr.deeper }}", {}),
    ("err_call_undefined_method", "{{ xs.startswith('a') }}", {"xs": [1]}),
    ("err_raise", "{{ raise_exception('boom') }}", {}),
    ("err_div_zero", "{{ 1 / 0 }}", {}),
    ("err_unknown_tag", "{% frobnicate %}", {}),
    ("err_unclosed_if", "{% if true %}x", {}),
    ("err_items_of_str", "{% for k, v in s|items %}{% endfor %}", {"s": "abc"}),
    ("err_append_sandboxed", "{% set xs = [] %}{{ xs.append(1) }}", {}),
    ("err_compare_str_int", "{{ 'a' < 1 }}", {}),
    ("err_undefined_plus", "{{ nothing + 1 }}", {}),
    # --- statements ---
    ("if_elif_else", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %},{% endfor %}", {}),
    ("for_loop_vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}", {}),
    ("for_prev_next", "{% for x in [1, 2, 3] %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }};{% endfor %}", {}),
    ("for_cycle", "{% for x in range(5) %}{{ loop.cycle('a', 'b') }}{% endfor %}", {}),
    ("for_else", "{% for x in [] %}x{% else %}empty{% endfor %}", {}),
    ("for_filter", "{% for x in range(10) if x is odd %}{{ x }}{{ '' if loop.last else ',' }}{% endfor %}", {}),
    ("for_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {"d": {"b": 1, "a": 2}}),
    ("for_dict_keys", "{% for k in d %}{{ k }}{% endfor %}", {"d": {"z": 1, "y": 2}}),
    ("for_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("for_scope", "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", {}),
    ("for_iteration_scope", "{% for i in [1, 2] %}{% if i == 1 %}{% set y = 'a' %}{% endif %}[{{ y }}]{% endfor %}", {}),
    ("nested_loops", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }} {% endfor %}{{ loop.index }};{% endfor %}", {}),
    ("namespace", "{% set ns = namespace(n=0, found=false) %}{% for x in [1, 2, 3] %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }} {{ ns.found }}", {}),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}", {}),
    ("set_block", "{% set x %}\n  hi {{ 1 + 1 }}\n{% endset %}[{{ x }}]", {}),
    ("set_block_filter", "{% set x | upper %}abc{% endset %}{{ x }}", {}),
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }}", {}),
    ("macro_caller", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold{% endcall %}", {}),
    ("macro_caller_args", "{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(v) each([1, 2]) %}[{{ v }}]{% endcall %}", {}),
    ("macro_sees_globals", "{% set g = 'G' %}{% macro m() %}{{ g }}{{ x }}{% endmacro %}{{ m() }}", {"x": "X"}),
    ("macro_missing_arg", "{% macro m(a, b) %}[{{ a }}|{{ b }}]{% endmacro %}{{ m(1) }}", {}),
    ("filter_block", "{% filter upper %}abc{{ 'd' }}{% endfilter %}", {}),
    # --- tests ---
    ("tests_types", "{{ s is string }}{{ 1 is number }}{{ 1.5 is number }}{{ 1 is integer }}{{ 1.5 is integer }}{{ true is integer }}{{ d is mapping }}{{ l is mapping }}{{ l is iterable }}{{ s is iterable }}{{ l is sequence }}{{ d is sequence }}{{ n is none }}{{ u is undefined }}{{ u is defined }}{{ true is boolean }}{{ 1 is boolean }}", {"s": "x", "d": {}, "l": [], "n": None}),
    ("tests_values", "{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}{{ 2 is eq 2 }}{{ 2 is ne 2 }}{{ 'a' is in 'abc' }}{{ x is not defined }}{{ x is not none }}", {}),
    ("tests_undefined_iterable", "{{ u is iterable }}{{ u is sequence }}{{ u is mapping }}{{ u is string }}", {}),
    # --- attribute and item access ---
    ("attr_item", "{{ m.role }} {{ m['content'] }} {{ l[0] }} {{ l[-1] }} {{ l.1 }} {{ m.missing is defined }} {{ l[10] is defined }}", {"m": {"role": "user", "content": "c"}, "l": [1, 2, 3]}),
    ("dict_method_vs_key", "{{ d.items is defined }} {{ d['items'] }} {{ d.get('items') }} {{ d.get('nope') }} {{ d.get('nope', 'dflt') }}", {"d": {"items": "field"}}),
    ("none_attr", "[{{ n.foo }}] {{ n.foo is defined }}", {"n": None}),
    ("slicing", "{{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ l[::2] }} {{ s[1:3] }} {{ s[::-1] }} {{ s[-2:] }} {{ l[5:] }}", {"l": [1, 2, 3, 4], "s": "h\u00e9llo"}),
    ("string_index", "{{ s[0] }}{{ s[-1] }}{{ s|length }}", {"s": "\u00e9t\u00e9"}),
    # --- string methods ---
    ("strip_chars", "[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}][{{ t.strip('xy') }}][{{ t.lstrip('x') }}][{{ t.rstrip('y') }}][{{ n.lstrip('\\n') }}]", {"s": "  a b  ", "t": "xxaayy", "n": "\n\n  a\n"}),
    ("split", "{{ s.split() }} {{ s.split(' ') }} {{ s.split('b', 1) }} {{ 'a,b,,c'.split(',') }} {{ s.split(none, 1) }}", {"s": " a  b c b "}),
    ("startswith_endswith", "{{ s.startswith('ab') }}{{ s.endswith('yz') }}{{ s.startswith(('x', 'a')) }}{{ s.endswith(('q',)) }}", {"s": "abcxyz"}),
    ("case_methods", "{{ s.upper() }} {{ s.lower() }} {{ s.title() }} {{ s.capitalize() }}", {"s": "hello wORLD-foo"}),
    ("replace_find_count", "{{ s.replace('a', 'o') }} {{ s.replace('a', 'o', 1) }} {{ s.find('n') }} {{ s.find('z') }} {{ s.count('a') }}", {"s": "banana"}),
    ("join_method", "{{ '-'.join(['a', 'b']) }}", {}),
    # --- filters ---
    ("tojson_basic", "{{ v|tojson }}", {"v": {"b": [1, 2.5, None, True], "a": "x\"y\\z\n\u00e9<>&'\u0001"}}),
    ("tojson_indent", "{{ v|tojson(indent=2) }}", {"v": {"b": [1, {}], "a": [], "c": {"d": "e"}}}),
    ("tojson_sort_sep", "{{ v|tojson(sort_keys=true, separators=(',', ':')) }}", {"v": {"b": 1, "a": [1, 2]}}),
    ("tojson_scalars", "{{ 1.0|tojson }} {{ 'x'|tojson }} {{ none|tojson }} {{ [1e20, 0.1]|tojson }}", {}),
    ("err_tojson_undefined", "{{ nothing|tojson }}", {}),
    ("trim_filter", "[{{ s|trim }}][{{ n|trim }}][{{ 'xxaxx'|trim('x') }}]", {"s": " \n a \t", "n": None}),
    ("length_count", "{{ l|length }} {{ s|length }} {{ d|length }} {{ l|count }} {{ u|length }}", {"l": [1, 2], "s": "\u00e9\U0001F600", "d": {"a": 1}}),
    ("string_int_float", "{{ 1|string }}{{ none|string }}{{ [1]|string }} {{ '42'|int }} {{ '4.5'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '2.5'|float }} {{ 2|float }}", {}),
    ("join_filter", "{{ l|join }} {{ l|join(', ') }} {{ ms|join('/', attribute='role') }}", {"l": ["a", 1, None], "ms": MSGS}),
    ("first_last", "{{ l|first }} {{ l|last }} {{ 'abc'|first }} [{{ []|first }}]", {"l": [1, 2, 3]}),
    ("list_filter", "{{ 'ab'|list }} {{ d|list }} {{ (1, 2)|list }}", {"d": {"x": 1}}),
    ("map_attribute", "{{ ms|map(attribute='role')|list }} {{ ms|map(attribute='nope', default='?')|list }}", {"ms": MSGS}),
    ("map_filter", "{{ ['a', 'B']|map('upper')|join }} {{ [' a ', 'b ']|map('trim')|list }} {{ ['x', 'yy']|map('length')|list }}", {}),
    ("selectattr", "{{ ms|selectattr('role', 'equalto', 'user')|map(attribute='content')|join(',') }} {{ ms|rejectattr('role', 'eq', 'user')|list|length }} {{ xs|selectattr('a')|list }} {{ xs|selectattr('a', 'defined')|list|length }}", {"ms": MSGS, "xs": [{"a": 1}, {"a": 0}, {"b": 2}]}),
    ("select_reject", "{{ range(6)|select('odd')|list }} {{ range(6)|reject('odd')|list }} {{ [0, 1, '', 'a']|select|list }}", {}),
    ("default_filter", "{{ u|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ none|default('d') }} {{ u|d }}", {}),
    ("safe_upper_lower_replace", "{{ '<a>'|safe }} {{ 'Ab'|upper }} {{ 'Ab'|lower }} {{ 'aXa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }}", {}),
    ("items_filter", "{% for k, v in d|items %}{{ k }}{{ v }}{% endfor %}{% for k, v in u|items %}x{% endfor %}", {"d": {"b": 1, "a": 2}}),
    ("unique_sort", "{{ [3, 1, 2, 1]|unique|list }} {{ ['b', 'A', 'a']|unique|list }} {{ [3, 1, 2]|sort }} {{ [3, 1, 2]|sort(reverse=true) }} {{ ['b', 'A', 'c']|sort }} {{ ms|sort(attribute='role')|map(attribute='content')|join(',') }}", {"ms": MSGS}),
    ("indent", "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(width='--', blank=true) }}", {}),
    ("capitalize_title", "{{ 'hELLO world'|capitalize }} {{ 'hello big-world'|title }}", {}),
    ("abs_round", "{{ -3|abs }} {{ -2.5|abs }} {{ 2.567|round(2) }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.1|round(0, 'ceil') }} {{ 2.9|round(method='floor') }} {{ 7|round }}", {}),
    ("reverse_min_max_sum", "{{ [1, 2, 3]|reverse|list }} {{ 'abc'|reverse }} {{ [3, 1, 2]|min }} {{ [3, 1, 2]|max }} {{ [1, 2, 3]|sum }} {{ ms|map(attribute='content')|map('length')|sum }} {{ ['b', 'A']|max }}", {"ms": MSGS}),
    ("batch_wordcount", "{{ range(5)|batch(2)|list }} {{ range(5)|batch(2, 'x')|list }} {{ 'one two  three'|wordcount }}", {}),
    ("dict_global", "{{ dict(a=1, b='x') }} {{ namespace(a=1).a }}", {}),
    ("range_global", "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }}", {}),
    ("unicode_case", "{{ 'caf\u00e9'|upper }} {{ '\u00c9t\u00e9'|lower }} {{ '\u00e9cole'|title }} {{ '\u00e9T\u00c9'|capitalize }}", {}),
    ("repr_specials", "{{ [x] }}", {"x": "it's \"q\" \\ \t \u0007 \u007f \u0085 \u2028 \U0001F600 \u200b \ufeff"}),
    ("tojson_specials", "{{ x|tojson }}", {"x": "\u007f \u0085 \u2028 \U0001F600 </script> \u0000"}),
    ("floats", "{{ 0.1 + 0.2 }} {{ 1e300 * 1e10 }} {{ -0.0 }} {{ 1/3*3 }} {{ 2.0**0.5 }} {{ 100000000000000000.0 }} {{ 123456789.123 }} {{ 7 % 2.5 }} {{ -7 % 2.5 }}", {}),
    ("quotes_in_tags", "{{ '{{' }} {{ '%}' }} {{ \"}}\" }}", {}),
    ("if_set_leaks", "{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}", {}),
    ("macro_set_local", "{% set x = 1 %}{% macro m() %}{% set x = 5 %}{{ x }}{% endmacro %}{{ m() }}{{ x }}", {}),
    ("macro_namespace", "{% set ns = namespace(v=0) %}{% macro m() %}{% set ns.v = ns.v + 1 %}{% endmacro %}{{ m() }}{{ m() }}{{ ns.v }}", {}),
    ("macro_default_uses_param", "{%- macro f(a, b=a ~ '!') -%}{{ b }}{%- endmacro -%}{{ f('x') }}", {}),
    ("mixed_whitespace", "a\n  {%- set x = 1 -%}\n\n  text\n  {# c #}\nb\n   {%+ if true -%}\n  c  {%- endif %}  \nd", {}),
    ("err_for_none", "{% for x in none %}{% endfor %}", {}),
    ("err_unpack_count", "{% for a, b in [[1, 2, 3]] %}{% endfor %}", {}),
    ("err_macro_too_many_args", "{% macro f(a) %}{{ a }}{% endmacro %}{{ f(1, 2) }}", {}),
    ("err_macro_unknown_kwarg", "{% macro f(a) %}{{ a }}{% endmacro %}{{ f(b=2) }}", {}),
    ("err_undefined_chain", "{{ x.y.z }}", {"x": {}}),
    ("err_compare_none", "{{ 1 < none }}", {}),
    ("percent_format", "{{ '%s-%d' % ('a', 3) }}|{{ '%5s|%-4d|' % ('ab', 7) }}{{ '%.2f %r %%' % (3.14159, 'x') }}|{{ '%s' % [1] }}|{{ '%s' % none }}|{{ '%.1s' % 'abc' }}|{{ '%d' % 3.9 }}", {}),
    ("err_percent_missing_arg", "{{ '%s %s' % ('a',) }}", {}),
    ("err_percent_extra_arg", "{{ '%s' % ('a', 'b') }}", {}),
    # map/select/reverse/items return generators in jinja2: always truthy, no len()
    ("generators_truthy", "{{ 'y' if xs|selectattr('a') else 'n' }}{{ 'y' if []|map('upper') else 'n' }}{{ 'y' if d|items else 'n' }}{{ 'y' if []|reverse else 'n' }}", {"xs": [], "d": {}}),
    ("generators_consumers", "{{ xs|map('string')|first }}{{ xs|reverse|join }}{{ xs|map('string')|list }}{{ xs|unique|list|length }}{{ xs|map('string') is sequence }}{{ xs|map('string') is iterable }}{{ (xs|map('string'))[0] is defined }}", {"xs": [1, 2]}),
    ("err_generator_length", "{{ xs|select|length }}", {"xs": [1]}),
    ("err_generator_last", "{{ xs|reverse|last }}", {"xs": [1]}),
    ("err_generator_tojson", "{{ xs|map('string')|tojson }}", {"xs": [1]}),
    # --- chat-template idioms ---
    ("chatml", "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}", {"messages": MSGS, "add_generation_prompt": True}),
    ("think_split", "{% set c = m.content %}{{ c.split('</think>')[-1].lstrip('\\n') }}|{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}", {"m": {"content": "<think>\n  reasoning\n</think>\n\n  answer"}}),
    ("system_first", "{% if messages[0]['role'] == 'system' %}{% set sys = messages[0]['content'] %}{% set rest = messages[1:] %}{% else %}{% set sys = '' %}{% set rest = messages %}{% endif %}[{{ sys }}]{{ rest|length }}", {"messages": MSGS}),
    ("content_parts", "{% for p in content %}{% if p.type == 'text' %}{{ p.text }}{% endif %}{% endfor %}|{{ content }}", {"content": [{"type": "text", "text": "hi"}, {"type": "image"}]}),
]


def main():
    out = []
    for name, template, context in CASES:
        case = {"name": name, "template": template, "context": context}
        try:
            case["expected"] = ENV.from_string(template).render(**context)
        except Exception as e:  # noqa: BLE001 — any jinja2 failure is an expected error
            case["error"] = f"{type(e).__name__}: {e}"
        out.append(case)
    path = "tests/chat/jinja_cases.json"
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"generator": "tools/make_jinja_cases.py", "jinja2": jinja2.__version__,
                   "cases": out}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(out)} cases to {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
