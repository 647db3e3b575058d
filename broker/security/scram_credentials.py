"""SCRAM credentials, as Kafka's ScramControlManager keeps them: per user and mechanism,
the salt, the iteration count and the keys derived from the salted password (the
password itself is never stored). Persisted in ``meta/scram-credentials.json``.
"""

from __future__ import annotations

from pathlib import Path

from broker.log.files import read_json, write_json

MECHANISMS = {1: ("SCRAM-SHA-256", "sha256"), 2: ("SCRAM-SHA-512", "sha512")}
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384


class CredentialError(Exception):
    def __init__(self, error_name: str, message: str) -> None:
        super().__init__(message)
        self.error_name = error_name


class ScramCredentials:
    def __init__(self, meta_dir: Path) -> None:
        self._path = Path(meta_dir) / "scram-credentials.json"
        self.users: dict[str, dict[str, dict]] = {}
        if self._path.exists():
            self.users = read_json(self._path)

    def describe(self, user: str) -> list[tuple[int, int]]:
        """(mechanism id, iterations) of the user's credentials; CredentialError if none."""
        stored = self.users.get(user)
        if not stored:
            raise CredentialError("RESOURCE_NOT_FOUND",
                                  f"Attempt to describe a user credential that does not exist: {user}")
        return sorted((int(m), c["iterations"]) for m, c in stored.items())

    def check_deletion(self, user: str, mechanism: int) -> None:
        _check_user_and_mechanism(user, mechanism)
        if str(mechanism) not in self.users.get(user, {}):
            raise CredentialError("RESOURCE_NOT_FOUND", "Attempt to delete a user credential that does not exist")

    @staticmethod
    def check_upsertion(user: str, mechanism: int, iterations: int) -> None:
        _check_user_and_mechanism(user, mechanism)
        if iterations < MIN_ITERATIONS:
            raise CredentialError("UNACCEPTABLE_CREDENTIAL", "Too few iterations")
        if iterations > MAX_ITERATIONS:
            raise CredentialError("UNACCEPTABLE_CREDENTIAL", "Too many iterations")

    def apply(self, deletions: list[tuple[str, int]], upsertions: list[tuple[str, int, int, bytes, bytes]]) -> None:
        for user, mechanism in deletions:
            self.users.get(user, {}).pop(str(mechanism), None)
            if not self.users.get(user):
                self.users.pop(user, None)
        # hashlib, hmac and base64 load when credentials change, not at every start
        import base64
        import hashlib
        import hmac

        for user, mechanism, iterations, salt, salted_password in upsertions:
            digest = MECHANISMS[mechanism][1]
            client_key = hmac.new(salted_password, b"Client Key", digest).digest()
            self.users.setdefault(user, {})[str(mechanism)] = {
                "iterations": iterations,
                "salt": base64.b64encode(salt).decode(),
                "stored_key": base64.b64encode(hashlib.new(digest, client_key).digest()).decode(),
                "server_key": base64.b64encode(hmac.new(salted_password, b"Server Key", digest).digest()).decode(),
            }
        write_json(self._path, self.users, indent=1, sort_keys=True)


def _check_user_and_mechanism(user: str, mechanism: int) -> None:
    if not user:
        raise CredentialError("UNACCEPTABLE_CREDENTIAL", "Username must not be empty")
    if mechanism not in MECHANISMS:
        raise CredentialError("UNSUPPORTED_SASL_MECHANISM", "Unknown SCRAM mechanism")
