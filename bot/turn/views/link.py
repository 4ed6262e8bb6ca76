"""What /link prints: its help line, the offer, the questions both accounts are asked, the outcome.

Accounts are shown by platform and id only (`account`). Pure text; no I/O.
"""

from __future__ import annotations

from memory.text import trim


LINK_HELP = ("/link [CODE|yes|no]: share one memory across your accounts, in direct messages only. /link gives a "
             "code; send /link CODE from your other account; then both accounts confirm with /link yes. The account "
             "that joins keeps its earlier memories to itself: they do not move into the shared memory.")
# Accounts are shown by platform and id only: a display name is whatever its owner typed, and was
# used to pass an attacker's account off as the victim's own phone.
LINK_OFFER_TEXT = ("Your link code: {code}\nSend “/link {code}” to me from your other account within {minutes} minutes; "
                   "then both accounts confirm. Never give this code to anyone else: the account that uses it will "
                   "read everything I remember about you, and what it tells me will be kept in your memory.")
LINK_ASK_ISSUER_TEXT = ("Your link code was sent to me from {claimant}. If you both confirm, that account joins your "
                        "memory: it will read everything I remember about you, and what it tells me from now on will be "
                        "kept in your memory. Only if {claimant} is your own account, send /link yes within {minutes} "
                        "minutes; otherwise send /link no.")
LINK_ASK_CLAIMANT_TEXT = ("This code was made by {issuer}. If you both confirm, your new messages here will be kept in the "
                          "memory of {issuer}, and whoever uses that account will read what you tell me from now on "
                          "(what you told me here before stays yours alone). Only if {issuer} is your own account, send "
                          "/link yes within {minutes} minutes; otherwise send /link no. The other account must confirm too.")
LINK_WAITING_TEXT = "Noted. Nothing is shared until {other} confirms too."
LINK_OTHER_SAID_YES_TEXT = "The link was confirmed by {other}; it is made once you send /link yes (or /link no to refuse)."
LINK_DONE_ISSUER_TEXT = ("Linked: {claimant} now shares your memory. It reads what I remember about you, and what it tells "
                         "me is kept in your memory.")
LINK_DONE_CLAIMANT_TEXT = ("Linked: your new messages here are now kept in the memory of {issuer}. What you told me here "
                           "before stays readable from this account only.")
LINK_REFUSED_TEXT = "Refused: nothing is shared between this account and {other}."
LINK_REFUSED_BY_OTHER_TEXT = "The link was refused by {other}; nothing is shared."


def _one_line(name: str) -> str:
    """A display name shown inside our own messages: one line, bounded (names are user input)."""
    return trim(" ".join(name.split()), 64)


def account(ident) -> str:
    """An account as a link shows it: its platform and id, never its display name."""
    return f"the {ident.channel} account {_one_line(ident.external_id)}"
