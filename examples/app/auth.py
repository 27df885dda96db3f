"""The Basic validator of the example's HTTP_BASIC port: argon2id password hashes.

A real service would load the hashes from its user store; the validator only has to return
exactly ``True`` for a good user and password.
"""

from __future__ import annotations

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

_hasher = PasswordHasher()

# user -> argon2id hash of the password ("lovelace" for ada)
USERS = {
    "ada": "$argon2id$v=19$m=65536,t=3,p=4$E2GPjEo0+q11DEuqw3M5iQ$Sdt/rvZxmbsxcWhsz02IS+l2kARbL49TchZVbZLVibY",
}
# Checked for unknown users, so that they cost the same time as known ones.
_DUMMY = USERS["ada"]


def check_user(user: str, password: str) -> bool:
    stored = USERS.get(user)
    try:
        return _hasher.verify(stored or _DUMMY, password) and stored is not None
    except (VerificationError, InvalidHashError):
        return False
