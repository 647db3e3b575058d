"""DescribeUserScramCredentials (50): mechanisms and iteration counts per user."""

from collections import Counter

from broker.errors import code
from broker.security.scram_credentials import CredentialError
from protocol.answer_wire import answer_type

API_KEY = 50
Answer = answer_type(API_KEY)


async def handle(ctx, request):
    credentials = ctx.broker.scram_credentials
    # null or empty: every user (librdkafka sends an empty list)
    names = sorted(credentials.users) if not request.users else [u.name for u in request.users]
    twice = {n for n, count in Counter(names).items() if count > 1}
    results = []
    for name in dict.fromkeys(names):
        result = Answer.DescribeUserScramCredentialsResult(user=name, error_code=0, error_message=None,
                                                           credential_infos=())
        if name in twice:
            result = result._replace(error_code=code("DUPLICATE_RESOURCE"),
                                     error_message=f"Cannot describe SCRAM credentials for the same user twice in a "
                                                   f"single request: {name}")
        else:
            try:
                result = result._replace(credential_infos=[Answer.CredentialInfo(mechanism=m, iterations=i)
                                                           for m, i in credentials.describe(name)])
            except CredentialError as e:
                result = result._replace(error_code=code(e.error_name), error_message=str(e))
        results.append(result)
    return Answer(error_code=0, error_message=None, results=results)
