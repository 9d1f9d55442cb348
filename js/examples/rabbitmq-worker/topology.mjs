// The queues of the RabbitMQ worker. Declaring is idempotent, so every
// process (workers, publisher) declares them on start.
//
//   <base>          quorum queue the workers consume; a message rejected
//                   without requeue, or delivered more than DELIVERY_LIMIT
//                   times (it crashed every worker that took it), goes to
//                   <base>.dead through the default exchange
//   <base>.retry    no consumers: a message waits its per-message TTL
//                   (expiration), then is dead-lettered back into <base>
//   <base>.dead     the dead-letter queue (messages that can never succeed)
//   <base>.parked   conflicts for a person or a reconciliation job
export const DELIVERY_LIMIT = 20;

export function queueNames(base = process.env.SWAPS_QUEUE || 'swaps') {
  return { main: base, retry: `${base}.retry`, dead: `${base}.dead`, parked: `${base}.parked` };
}

export async function declareQueues(channel, names) {
  await channel.assertQueue(names.dead, { durable: true });
  await channel.assertQueue(names.parked, { durable: true });
  await channel.assertQueue(names.main, {
    durable: true,
    arguments: {
      'x-queue-type': 'quorum',
      'x-dead-letter-exchange': '',
      'x-dead-letter-routing-key': names.dead,
      'x-delivery-limit': DELIVERY_LIMIT,
    },
  });
  await channel.assertQueue(names.retry, {
    durable: true,
    arguments: { 'x-dead-letter-exchange': '', 'x-dead-letter-routing-key': names.main },
  });
}

/** Publishes on a confirm channel and resolves once the broker has the message. */
export function publishConfirmed(channel, queue, content, options = {}) {
  return new Promise((resolve, reject) => {
    channel.sendToQueue(queue, content, { persistent: true, ...options }, (error) => (error ? reject(error) : resolve()));
  });
}
