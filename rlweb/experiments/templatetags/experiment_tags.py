"""Template filters for the experiment pages."""

from django import template

register = template.Library()


@register.filter
def duration(seconds: float | None) -> str:
    """A short, rounded duration: "45 s", "12 min", "3 h 05 min", "2 d 4 h"; "" for None."""
    if seconds is None:
        return ""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


@register.filter
def steps(value) -> str:
    """A step count as people read it in a narrow column: 950, 9500, 84k, 61.5k, 1.2M, 10M."""
    if value is None:
        return "–"
    value = int(value)
    if value < 10_000:
        return str(value)
    if value < 1_000_000:
        return f"{value / 1_000:.3g}k"
    return f"{value / 1_000_000:.3g}M"
