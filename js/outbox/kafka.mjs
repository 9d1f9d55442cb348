// idemflow/kafka for ES modules: the same objects as kafka.cjs.
import relay from './kafka.cjs';

export const { createKafkaRelay, kafkaRecord, RELAY_HEADERS } = relay;

export default relay;
