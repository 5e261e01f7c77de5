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
