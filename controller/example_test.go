package controller_test

import (
	"fmt"

	"github.com/replicatorhq/replicator/controller"
)

// A group of three: the first registration elects broker 1; the master
// adds the slaves to the in-sync set as they catch up; its lease expires
// and the member with the most data takes over at the next epoch.
func ExampleStep() {
	opt := controller.Options{}
	s := controller.NewState()
	var d controller.Decision
	for id := int64(1); id <= 3; id++ {
		s, d = controller.Step(s, controller.NodeRegistered{Node: controller.Node{BrokerID: id}}, opt)
	}
	s, d = controller.Step(s, controller.AlterSyncStateSet{Master: 1, MasterEpoch: 1, SetEpoch: 1, Set: []int64{1, 2, 3}}, opt)
	fmt.Println(d.Outcome, d.Set, "set epoch", d.SetEpoch)
	s, _ = controller.Step(s, controller.Heartbeat{BrokerID: 2, Epoch: 1, MaxOffset: 4096}, opt)
	s, _ = controller.Step(s, controller.Heartbeat{BrokerID: 3, Epoch: 1, MaxOffset: 8192}, opt)
	s, d = controller.Step(s, controller.LeaseExpired{BrokerID: 1}, opt)
	fmt.Println(d.Outcome, "broker", d.Master, "epoch", d.MasterEpoch, d.Set)
	b, _ := controller.EncodeGroup(s.Group)
	fmt.Println(string(b))
	// Output:
	// set-accepted [1 2 3] set epoch 2
	// elected broker 3 epoch 2 [3]
	// {"master":3,"master_epoch":2,"sync_state_set":[3],"sync_state_set_epoch":3}
}
