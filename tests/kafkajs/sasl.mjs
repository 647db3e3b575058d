// kafkajs over SASL and/or TLS: as WRITER, a transaction of three records into TOPIC,
// committed; then as READER, the records read back read_committed by a consumer group.
// Prints one JSON line: {"read": [...]} or {"error": {"type", "message"}}.
// Usage: node sasl.mjs BOOTSTRAP MECHANISM WRITER SECRET READER SECRET TOPIC TXN_ID GROUP
// MECHANISM "none": no SASL. With KAFKAJS_CERTS (a directory `eosbroker certs` wrote), over TLS
// trusting its ca.crt; with KAFKAJS_CLIENT_CERTS=1 too, each user shows USER.crt/USER.key (mTLS).
import { readFileSync } from "node:fs";
import { Kafka, logLevel } from "kafkajs";

const [bootstrap, mechanism, writer, writerSecret, reader, readerSecret, topic, txnId, group] = process.argv.slice(2);

function sasl(user, secret) {
  if (mechanism === "oauthbearer") {
    return { mechanism, oauthBearerProvider: async () => ({ value: secret }) };
  }
  return { mechanism, username: user, password: secret };
}

function tls(user) {
  const dir = process.env.KAFKAJS_CERTS;
  if (!dir) return undefined;
  const out = { ca: [readFileSync(`${dir}/ca.crt`)] };
  if (process.env.KAFKAJS_CLIENT_CERTS === "1") {
    out.cert = readFileSync(`${dir}/${user}.crt`);
    out.key = readFileSync(`${dir}/${user}.key`);
  }
  return out;
}

function client(user, secret) {
  return new Kafka({ clientId: `kafkajs-${user}`, brokers: [bootstrap], ssl: tls(user),
                     sasl: mechanism === "none" ? undefined : sasl(user, secret),
                     logLevel: logLevel.NOTHING, retry: { retries: 2 } });
}

async function main() {
  const values = [0, 1, 2].map((i) => `${txnId}-${i}`);
  const producer = client(writer, writerSecret).producer({ transactionalId: txnId, idempotent: true,
                                                           maxInFlightRequests: 1 });
  await producer.connect();
  try {
    const txn = await producer.transaction();
    await txn.send({ topic, messages: values.map((value) => ({ value })) });
    await txn.commit();
  } finally {
    await producer.disconnect();
  }
  const consumer = client(reader, readerSecret).consumer({ groupId: group, readUncommitted: false });
  await consumer.connect();
  const read = [];
  await consumer.subscribe({ topic, fromBeginning: true });
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("records not read within 30 s")), 30000);
    consumer.run({
      eachMessage: async ({ message }) => {
        const value = message.value.toString();
        if (values.includes(value)) read.push(value);
        if (read.length === values.length) { clearTimeout(timer); resolve(); }
      },
    }).catch(reject);
  });
  await consumer.disconnect();
  return read;
}

main().then(
  (read) => { console.log(JSON.stringify({ read })); process.exit(0); },
  (e) => { console.log(JSON.stringify({ error: { type: e.type || e.name, message: e.message } })); process.exit(0); },
);
