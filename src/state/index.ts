export * from './records';
export * from './files';
export * from './journal';
export * from './store';
export * from './salvage';
export * from './outbox';
