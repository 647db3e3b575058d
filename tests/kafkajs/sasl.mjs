// kafkajs over SASL and/or TLS: as WRITER, a transaction of three records into TOPIC,
// committed; then as READER, the records read back read_committed by a consumer group.
// Prints one JSON line: {"read": [...]} or {"error": {"type", "message"}}.
// Usage: node sasl.mjs BOOTSTRAP MECHANISM WRITER SECRET READER SECRET TOPIC TXN_ID GROUP
// MECHANISM "none": no SASL. With KAFKAJS_CERTS (a directory `eosbroker certs` wrote), over TLS
// trusting its ca.crt; with KAFKAJS_CLIENT_CERTS=1 too, each user shows USER.crt/USER.key (mTLS).
// KAFKAJS_TRANSACTIONS=N: N transactions, KAFKAJS_PAUSE_MS apart, on one producer (values
// TXN_ID-i, then TXN_ID-t-i); KAFKAJS_REAUTH_THRESHOLD_MS: re-authenticate (KIP-368) that long
// before a session ends (kafkajs's reauthenticationThreshold). The JSON line also counts the
// connections the broker closed ("server_closes", from kafkajs's debug log).
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

let serverCloses = 0;
const countServerCloses = () => ({ log }) => {
  if (log.message === "Kafka server has closed connection") serverCloses++;
};

function client(user, secret) {
  return new Kafka({ clientId: `kafkajs-${user}`, brokers: [bootstrap], ssl: tls(user),
                     sasl: mechanism === "none" ? undefined : sasl(user, secret),
                     logLevel: logLevel.DEBUG, logCreator: countServerCloses, retry: { retries: 2 },
                     reauthenticationThreshold: Number(process.env.KAFKAJS_REAUTH_THRESHOLD_MS || 10000) });
}

async function main() {
  const transactions = Number(process.env.KAFKAJS_TRANSACTIONS || 1);
  const pauseMs = Number(process.env.KAFKAJS_PAUSE_MS || 0);
  const values = [];
  const producer = client(writer, writerSecret).producer({ transactionalId: txnId, idempotent: true,
                                                           maxInFlightRequests: 1 });
  await producer.connect();
  try {
    for (let t = 0; t < transactions; t++) {
      if (t > 0) await new Promise((resolve) => setTimeout(resolve, pauseMs));
      const batch = [0, 1, 2].map((i) => (t === 0 ? `${txnId}-${i}` : `${txnId}-${t}-${i}`));
      values.push(...batch);
      const txn = await producer.transaction();
      await txn.send({ topic, messages: batch.map((value) => ({ value })) });
      await txn.commit();
    }
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
  (read) => { console.log(JSON.stringify({ read, server_closes: serverCloses })); process.exit(0); },
  (e) => {
    console.log(JSON.stringify({ error: { type: e.type || e.name, message: e.message }, server_closes: serverCloses }));
    process.exit(0);
  },
);
