"""The console's endpoint settings form: flat HTML fields <-> a nested RuntimeSpec dict.

Each input is named by its RuntimeSpec field path (``parallelism.tp``), so server-side issues
(which name the same paths) land next to the right input. Values are coerced by the type the
spec declares for that path, because RuntimeSpec parses strictly (no "4" for 4). Rendering and
validation metadata live here; checking the settings is ``runtime.validate``'s job.

- ``schema``: what one input is (FormField, Section) and what the spec declares for its path;
- ``fields``: the form's sections and fields as data, and the spec it starts from;
- ``parse``: a posted form -> the spec dict, with field issues for values that are not numbers;
- ``bind``: fields bound to values and issues for the page, and the TP choices.
"""

from deployments.endpoints.forms.bind import (
    BoundField,
    BoundSection,
    ShownIssue,
    bind,
    field_label,
    initial_values,
    posted_values,
    tp_choices,
    tp_key,
)
from deployments.endpoints.forms.fields import (
    ALL_FIELDS,
    ARCH_PREFIX,
    CUSTOM_ARCH_TOGGLE,
    DEFAULT_SPEC,
    SECTIONS,
    TP_WIDTHS,
    model_choices,
)
from deployments.endpoints.forms.parse import (
    ParsedForm,
    flatten,
    issues_by_field,
    parse_spec,
    uses_custom_architecture,
)
from deployments.endpoints.forms.schema import OPTIONAL_GROUPS, FormField, Section, spec_annotation

__all__ = [
    "ALL_FIELDS",
    "ARCH_PREFIX",
    "CUSTOM_ARCH_TOGGLE",
    "DEFAULT_SPEC",
    "OPTIONAL_GROUPS",
    "SECTIONS",
    "TP_WIDTHS",
    "BoundField",
    "BoundSection",
    "FormField",
    "ParsedForm",
    "Section",
    "ShownIssue",
    "bind",
    "field_label",
    "flatten",
    "initial_values",
    "issues_by_field",
    "model_choices",
    "parse_spec",
    "posted_values",
    "spec_annotation",
    "tp_choices",
    "tp_key",
    "uses_custom_architecture",
]
