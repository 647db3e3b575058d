"""AlterUserScramCredentials (51): deletes and upserts SCRAM credentials; a user's
changes all succeed or all fail, as in Kafka."""

from collections import Counter

from broker.errors import code
from broker.security.scram_credentials import CredentialError
from protocol.answer_wire import answer_type

API_KEY = 51
Answer = answer_type(API_KEY)


async def handle(ctx, request):
    credentials = ctx.broker.scram_credentials
    keys = [(d.name, d.mechanism) for d in request.deletions] + [(u.name, u.mechanism) for u in request.upsertions]
    altered_twice = {user for (user, _), count in Counter(keys).items() if count > 1}
    errors: dict[str, tuple[str, str]] = {}
    for user in altered_twice:
        errors[user] = ("DUPLICATE_RESOURCE", "A user credential cannot be altered twice in the same request")
    for d in request.deletions:
        if d.name not in errors:
            try:
                credentials.check_deletion(d.name, d.mechanism)
            except CredentialError as e:
                errors[d.name] = (e.error_name, str(e))
    for u in request.upsertions:
        if u.name not in errors:
            try:
                credentials.check_upsertion(u.name, u.mechanism, u.iterations)
            except CredentialError as e:
                errors[u.name] = (e.error_name, str(e))
    credentials.apply([(d.name, d.mechanism) for d in request.deletions if d.name not in errors],
                      [(u.name, u.mechanism, u.iterations, u.salt, u.salted_password)
                       for u in request.upsertions if u.name not in errors])
    results = []
    for user in dict.fromkeys(name for name, _ in keys):
        error_name, message = errors.get(user, ("NONE", None))
        results.append(Answer.AlterUserScramCredentialsResult(user=user, error_code=code(error_name),
                                                              error_message=message))
    return Answer(results=results)
