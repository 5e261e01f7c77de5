"""Forget refused sign-ins, so that no delay holds a username or an address back (as the Users page's Clear
button does for a user):

    manage.py clear_sign_in_failures alice                  # alice's, from every address
    manage.py clear_sign_in_failures --address 203.0.113.7  # that address's, for every username
    manage.py clear_sign_in_failures --all                  # every one
"""

from django.core.management.base import BaseCommand, CommandError

from rlweb.accounts import throttle


class Command(BaseCommand):
    help = "Forget refused sign-ins for usernames, an address, or all, lifting their delays."

    def add_arguments(self, parser):
        parser.add_argument("usernames", nargs="*")
        parser.add_argument("--address", help="only this client address (with no usernames: every username)")
        parser.add_argument("--all", dest="everything", action="store_true", help="every refused sign-in")

    def handle(self, *args, usernames, address, everything, **options):
        if not (usernames or address or everything):
            raise CommandError("Name usernames, --address or --all.")
        if everything:
            cleared = throttle.clear_failures()
        elif usernames:
            cleared = sum(throttle.clear_failures(username, address) for username in usernames)
        else:
            cleared = throttle.clear_failures(ip=address)
        self.stdout.write(f"Cleared {cleared} failed sign-in{'s' if cleared != 1 else ''}.")
