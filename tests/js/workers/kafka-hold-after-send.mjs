// Preloaded (node --import) into the example relay by the relay crash test:
// every kafkajs producer's send, once the broker has acknowledged it, reports
// the operation ids it carried on stdout and then never returns, so the outbox
// consumer never marks those operations done. The test SIGKILLs the process
// there: after the broker acknowledged, before the store recorded it.
import kafkajs from 'kafkajs';

const producer = kafkajs.Kafka.prototype.producer;
kafkajs.Kafka.prototype.producer = function heldProducer(...args) {
  const made = producer.apply(this, args);
  const send = made.send.bind(made);
  made.send = async (record) => {
    await send(record);
    const acknowledged = record.messages.map((message) => String(message.headers?.['idemflow-operation-id']));
    process.stdout.write(`${JSON.stringify({ role: 'hold', acknowledged })}\n`);
    return new Promise(() => {});
  };
  return made;
};
