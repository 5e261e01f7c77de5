"""A JSON body given to a page's Django form, so the API validates exactly as the page does: the body's fields
become the form's data (hyperparameters as its `hp_<name>` fields), and the form's errors come back as ninja's 422,
one entry per field (`loc` ["body", "total_steps"] or ["body", "hyperparameters", "learning_rate"]; a message
for the whole form has the loc ["body"])."""

from __future__ import annotations

from ninja.errors import ValidationError

from rlweb.experiments.forms import HYPERPARAMETER_PREFIX, preset_fields


def form_data(form_class, fields: dict, hyperparameters: dict, algorithm: str, env_id: str, preset: str) -> dict:
    """The data a browser would post: each field the body leaves out at the form's initial value, and each
    hyperparameter it leaves out at the value the page fills in (the preset's, or the algorithm's default)."""
    data = {name: field.initial for name, field in form_class.base_fields.items() if field.initial is not None}
    data.update({name: value for name, value in fields.items() if value is not None})
    try:
        start = preset_fields(algorithm, env_id, preset)
    except ValueError:  # an unknown algorithm or preset: the form says so by its field
        start = {"values": {}, "default_name": ""}
    data.setdefault("name", start.get("default_name") or algorithm)
    values = {**start["values"], **hyperparameters}
    data.update({HYPERPARAMETER_PREFIX + name: field_text(value) for name, value in values.items()})
    return {name: value for name, value in data.items() if value is not None and not callable(value)}


def field_text(value):
    """What a browser would post for a value: booleans stay booleans (a checkbox), the rest as text."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def raise_form_errors(form, hyperparameters: dict | None = None) -> None:
    """ninja's 422 with every error by field, when there are any (else the form is valid and cleaned): the form's,
    and each of `hyperparameters` (the body's) that the form's algorithm does not have (a browser cannot post one;
    the form would silently drop it). An algorithm that does not exist has no hyperparameters to check: its error
    stands alone for them."""
    errors = []
    for name, messages in form.errors.items():
        if name == "__all__":
            loc = ["body"]
        elif name.startswith(HYPERPARAMETER_PREFIX):
            loc = ["body", "hyperparameters", name.removeprefix(HYPERPARAMETER_PREFIX)]
        else:
            loc = ["body", name]
        errors += [{"loc": loc, "msg": str(message), "type": "form"} for message in messages]
    if "algorithm" in form.errors:
        errors = [error for error in errors if error["loc"][1:2] != ["hyperparameters"]]
    else:
        unknown = sorted(name for name in hyperparameters or {} if HYPERPARAMETER_PREFIX + name not in form.fields)
        errors += [{"loc": ["body", "hyperparameters", name[:100]], "type": "unknown",
                    "msg": f"{form.algorithm_name} has no hyperparameter {name[:100]!r}"} for name in unknown]
    if errors:
        raise ValidationError(errors)
