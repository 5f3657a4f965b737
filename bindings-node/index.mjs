// ESM entry: the same objects as the CommonJS entry (index.js).
import rocklet from './index.js';

export const { Broker, RockletError, ClientError, ConfigError, StorageError, CorruptedError, StateError } = rocklet;
export default rocklet;
