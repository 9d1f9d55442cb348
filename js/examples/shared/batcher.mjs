// Groups deliveries into batches for handle.batch (one transaction each): a
// batch goes when it holds `size` messages, or `lingerMs` after its first
// message arrived, whichever comes first. A broker's prefetch bounds how many
// messages are held at once, so `size` is the prefetch: a full window is one batch.
export function createBatcher({ size, lingerMs = 5, run }) {
  let pending = [];
  let timer = null;
  const flush = () => {
    clearTimeout(timer);
    timer = null;
    const batch = pending;
    pending = [];
    if (batch.length > 0) run(batch);
  };
  return {
    push(item) {
      pending.push(item);
      if (pending.length >= size) flush();
      else if (timer === null) timer = setTimeout(flush, lingerMs);
    },
    get held() {
      return pending.length;
    },
  };
}
