"""Make an API token for a user and print it (for scripts and setup; the Tokens page does the same):

    manage.py apitoken alice laptop            # never expires
    manage.py apitoken alice ci --days 30
"""

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from rlweb.api.models import ApiToken


class Command(BaseCommand):
    help = "Make a named API token for USERNAME and print it; it cannot be shown again."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("name", help="what the token is for")
        parser.add_argument("--days", type=int, help="expire after this many days (default: never)")

    def handle(self, *args, username, name, days, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user {username!r}.")
        if days is not None and days < 1:
            raise CommandError("--days must be at least 1.")
        if not 1 <= len(name) <= 100:
            raise CommandError("The name has 1 to 100 characters.")
        _, text = ApiToken.issue(user, name, timezone.now() + timedelta(days=days) if days else None)
        self.stdout.write(text)
