/* The provider of the oxidecomputer `usdt` probe in the bench loop. */
provider oxbench {
	probe hit(uint64_t, uint64_t);
};
