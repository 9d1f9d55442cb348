// Preloaded (node --import) into the example Kafka worker by the retry chain
// test: once a producer's sendBatch that carried a copy to a retry topic has
// been acknowledged by the broker, the process SIGKILLs itself, before the
// worker commits the offset of the message the copy was made of, as long as
// the file KAFKA_KILLS_FILE holds a count above 0 (it takes one off first).
// Each restart gets the message again and sends another copy of the same
// attempt: the crash that forks an event into several retry chains.
import fs from 'node:fs';
import kafkajs from 'kafkajs';

const file = process.env.KAFKA_KILLS_FILE;
const producer = kafkajs.Kafka.prototype.producer;
kafkajs.Kafka.prototype.producer = function killedAfterRetry(...args) {
  const made = producer.apply(this, args);
  const sendBatch = made.sendBatch.bind(made);
  made.sendBatch = async (batch) => {
    const answer = await sendBatch(batch);
    const left = Number(fs.readFileSync(file, 'utf8'));
    if (left > 0 && batch.topicMessages.some(({ topic }) => topic.endsWith('.retry'))) {
      fs.writeFileSync(file, String(left - 1));
      process.stdout.write(`${JSON.stringify({ role: 'kill', left: left - 1 })}\n`);
      process.kill(process.pid, 'SIGKILL');
      await new Promise(() => {});
    }
    return answer;
  };
  return made;
};
